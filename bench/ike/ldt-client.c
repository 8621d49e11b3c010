/*
 * ldt-client: drives strongSwan's load-tester plugin through its control socket
 * (charon.plugins.load-tester.socket) and times what it reports.
 *
 * The plugin reads "<count> <delay ms>\n", initiates <count> IKE SAs (each with its first
 * CHILD_SA), writes '.' per initiation ('!' when one could not start), '+' per IKE SA
 * established, '-' per IKE SA destroyed before that, '*' per retransmission, and '\n'
 * once every initiated SA is established or gone (load_tester_control.c, strongSwan 5.9).
 *
 * Usage: ldt-client SOCKET COUNT DELAY_MS TIMEOUT_S
 * Prints one line:
 *   ldt count=N initiated=I established=E failed=F retransmits=R complete=0|1
 *       first_ms=T last_ms=T seconds=S rate=R
 * first_ms/last_ms: from sending the request to the first/last '+'; rate: E / last '+'.
 * Every wait is bounded by TIMEOUT_S. Exit status 0 when all COUNT were established.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char *argv[])
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	unsigned count, delay, timeout;
	unsigned dots = 0, plus = 0, minus = 0, stars = 0, bangs = 0;
	double t0, first = -1, last = -1, deadline;
	int fd, complete = 0;
	char req[64], buf[4096];

	if (argc != 5 || strlen(argv[1]) >= sizeof(addr.sun_path))
	{
		fprintf(stderr, "usage: %s SOCKET COUNT DELAY_MS TIMEOUT_S\n", argv[0]);
		return 2;
	}
	count = strtoul(argv[2], NULL, 10);
	delay = strtoul(argv[3], NULL, 10);
	timeout = strtoul(argv[4], NULL, 10);
	if (!count || !timeout)
	{
		fprintf(stderr, "COUNT and TIMEOUT_S must be positive\n");
		return 2;
	}
	strcpy(addr.sun_path, argv[1]);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0)
	{
		fprintf(stderr, "connecting to %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	snprintf(req, sizeof(req), "%u %u\n", count, delay);
	t0 = now_s();
	deadline = t0 + timeout;
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req))
	{
		fprintf(stderr, "writing the request: %s\n", strerror(errno));
		return 1;
	}
	while (!complete)
	{
		struct pollfd p = { .fd = fd, .events = POLLIN };
		double left = deadline - now_s();
		ssize_t n, i;

		if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0)
		{
			break;
		}
		n = read(fd, buf, sizeof(buf));
		if (n <= 0)
		{
			break;
		}
		for (i = 0; i < n; i++)
		{
			switch (buf[i])
			{
				case '.':
					dots++;
					break;
				case '!':
					bangs++;
					break;
				case '+':
					last = now_s() - t0;
					if (first < 0)
					{
						first = last;
					}
					plus++;
					break;
				case '-':
					minus++;
					break;
				case '*':
					stars++;
					break;
				case '\n':
					complete = 1;
					break;
				default:
					break;
			}
		}
	}
	close(fd);
	printf("ldt count=%u initiated=%u established=%u failed=%u retransmits=%u "
		   "complete=%d first_ms=%.3f last_ms=%.3f seconds=%.3f rate=%.1f\n",
		   count, dots, plus, minus + bangs, stars, complete,
		   first < 0 ? 0.0 : first * 1e3, last < 0 ? 0.0 : last * 1e3,
		   now_s() - t0, last > 0 ? plus / last : 0.0);
	return plus == count ? 0 : 1;
}
