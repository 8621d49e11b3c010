//! Running short commands with a bound on their time.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// What a finished command printed.
#[derive(Debug, Clone)]
pub struct Output {
    /// Standard output, lossily decoded.
    pub stdout: String,
    /// Standard error, lossily decoded.
    pub stderr: String,
    /// Whether it exited with status 0.
    pub success: bool,
}

/// Runs `argv` to completion, killing it if it runs past `limit`.
///
/// Output is read on helper threads so a chatty command cannot block on a full pipe.
pub fn run(argv: &[&str], limit: Duration) -> Result<Output> {
    let line = argv.join(" ");
    let (prog, args) =
        argv.split_first().ok_or_else(|| Error::Invalid { what: "command", value: String::new() })?;
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Spawn { command: line.clone(), source })?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                // Our own child: killing it by its handle cannot hit another process.
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Timeout { command: line, limit });
            }
            Err(source) => return Err(Error::Io { what: format!("waiting for `{line}`"), source }),
        }
    };
    Ok(Output {
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        success: status.success(),
    })
}

/// Like [`run`], but a non-zero exit is an error carrying its standard error.
pub fn run_ok(argv: &[&str], limit: Duration) -> Result<Output> {
    let out = run(argv, limit)?;
    if out.success {
        Ok(out)
    } else {
        Err(Error::Failed {
            command: argv.join(" "),
            status: "non-zero exit".to_owned(),
            stderr: out.stderr.trim().to_owned(),
        })
    }
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_output_and_status() {
        let out = run(&["sh", "-c", "echo hi; echo err >&2; exit 3"], Duration::from_secs(5)).unwrap();
        assert_eq!(out.stdout, "hi\n");
        assert_eq!(out.stderr, "err\n");
        assert!(!out.success);
        assert!(matches!(run_ok(&["false"], Duration::from_secs(5)), Err(Error::Failed { .. })));
    }

    #[test]
    fn kills_a_command_past_its_bound() {
        let start = Instant::now();
        let r = run(&["sleep", "30"], Duration::from_millis(200));
        assert!(matches!(r, Err(Error::Timeout { .. })));
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        assert!(matches!(run(&["/nonexistent/prog"], Duration::from_secs(1)), Err(Error::Spawn { .. })));
    }
}
