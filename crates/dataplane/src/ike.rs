//! IKE messages that arrive on an ESP-in-UDP port (RFC 3948: IKE and ESP share port 4500,
//! told apart by the non-ESP marker), handed from the workers to the control thread.
//!
//! The workers own the port-4500 sockets (`SO_REUSEPORT` spreads peers over them), so the
//! IKE engine cannot read that port itself: a worker that finds an IKE message in a batch
//! copies it into this bounded queue and wakes the control thread through an eventfd. A
//! full queue drops and counts (an IKE flood must not grow memory or stall ESP).

use core::net::SocketAddr;
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use cio::poll::EventFd;

use crate::error::Error;

/// The non-ESP marker (RFC 3948 §2.2) that the ESP core strips and the IKE engine expects.
const NON_ESP_MARKER: [u8; 4] = [0; 4];

/// One IKE datagram received on an ESP-in-UDP socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IkeDatagram {
    /// The sender.
    pub remote: SocketAddr,
    /// Our address and port it arrived at.
    pub local: SocketAddr,
    /// The UDP payload as received: the non-ESP marker, then the IKE message.
    pub bytes: Vec<u8>,
}

/// The bounded queue from the workers to the control thread.
#[derive(Debug)]
pub struct IkeInbox {
    queue: Mutex<VecDeque<IkeDatagram>>,
    wake: EventFd,
    limit: usize,
    dropped: AtomicU64,
}

impl IkeInbox {
    /// A queue that holds at most `limit` datagrams.
    pub fn new(limit: usize) -> Result<Self, Error> {
        Ok(Self {
            queue: Mutex::new(VecDeque::new()),
            wake: EventFd::new()?,
            limit,
            dropped: AtomicU64::new(0),
        })
    }

    /// Queues a message (without its marker, as the ESP core hands it over); `false` when
    /// the queue was full and the message was dropped.
    pub(crate) fn push(&self, remote: SocketAddr, local: SocketAddr, message: &[u8]) -> bool {
        let Ok(mut q) = self.queue.lock() else { return false };
        if q.len() >= self.limit {
            drop(q);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let mut bytes = Vec::with_capacity(NON_ESP_MARKER.len() + message.len());
        bytes.extend_from_slice(&NON_ESP_MARKER);
        bytes.extend_from_slice(message);
        q.push_back(IkeDatagram { remote, local, bytes });
        drop(q);
        let _ = self.wake.notify();
        true
    }

    /// Takes everything queued so far and re-arms the wake-up.
    pub fn drain(&self) -> Vec<IkeDatagram> {
        // Cleared before taking: a push after this point notifies again, so none is missed.
        self.wake.clear();
        match self.queue.lock() {
            Ok(mut q) => q.drain(..).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Messages dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl AsFd for IkeInbox {
    /// Readable while messages wait.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn messages_get_their_marker_back_and_a_full_queue_drops() {
        let inbox = IkeInbox::new(2).unwrap();
        let (r, l) = ("198.18.0.1:4500".parse().unwrap(), "198.18.0.2:4500".parse().unwrap());
        assert!(inbox.push(r, l, b"ike1"));
        assert!(inbox.push(r, l, b"ike2"));
        assert!(!inbox.push(r, l, b"ike3"));
        assert_eq!(inbox.dropped(), 1);
        let fds = [inbox.as_fd()];
        assert_eq!(cio::poll::wait_readable(&fds, Duration::from_secs(1)).unwrap(), 1);
        let got = inbox.drain();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].bytes, b"\0\0\0\0ike1");
        assert_eq!((got[1].remote, got[1].local), (r, l));
        assert_eq!(cio::poll::wait_readable(&fds, Duration::from_millis(5)).unwrap(), 0);
        assert!(inbox.drain().is_empty());
    }
}
