//! IKE messages that arrive on an ESP-in-UDP port (RFC 3948: IKE and ESP share port 4500,
//! told apart by the non-ESP marker), handed from the workers to the control thread.
//!
//! The workers own the port-4500 sockets (`SO_REUSEPORT` spreads peers over them), so the
//! IKE engine cannot read that port itself: a worker that receives a datagram starting with
//! the marker copies it, as received, into this bounded queue and wakes the control thread
//! through an eventfd. It never enters an ESP batch, so an IKE message is bounded only by
//! the receive buffer (64 KiB, a whole reassembled datagram), not by the batch's slots,
//! which are sized for the TUN MTU. A full queue drops and counts (an IKE flood must not
//! grow memory or stall ESP).

use core::net::SocketAddr;
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use cio::poll::EventFd;
use wire::udp_encap::NON_ESP_MARKER;

use crate::error::Error;

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

    /// Whether a UDP payload received on an ESP-in-UDP port is IKE: it starts with the
    /// non-ESP marker (RFC 3948 §2.2; an SPI is never zero).
    pub(crate) fn is_ike(payload: &[u8]) -> bool {
        payload.starts_with(&NON_ESP_MARKER)
    }

    /// Queues a UDP payload as received (the marker, then the IKE message); `false` when
    /// the queue was full and it was dropped.
    pub(crate) fn push(&self, remote: SocketAddr, local: SocketAddr, payload: &[u8]) -> bool {
        let Ok(mut q) = self.queue.lock() else { return false };
        if q.len() >= self.limit {
            drop(q);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        q.push_back(IkeDatagram { remote, local, bytes: payload.to_vec() });
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
    fn ike_is_told_apart_by_its_marker() {
        assert!(IkeInbox::is_ike(b"\0\0\0\0\x01"));
        assert!(!IkeInbox::is_ike(&[0, 0, 0, 1, 0, 0, 0, 1]));
        assert!(!IkeInbox::is_ike(&[0xff]));
        assert!(!IkeInbox::is_ike(&[0, 0, 0]));
    }

    #[test]
    fn messages_keep_their_marker_and_a_full_queue_drops() {
        let inbox = IkeInbox::new(2).unwrap();
        let (r, l) = ("198.18.0.1:4500".parse().unwrap(), "198.18.0.2:4500".parse().unwrap());
        assert!(inbox.push(r, l, b"\0\0\0\0ike1"));
        assert!(inbox.push(r, l, b"\0\0\0\0ike2"));
        assert!(!inbox.push(r, l, b"\0\0\0\0ike3"));
        assert_eq!(inbox.dropped(), 1);
        let fds = [inbox.as_fd()];
        assert_eq!(cio::poll::wait_readable(&fds, Duration::from_secs(1)).unwrap(), 1);
        let got = inbox.drain();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].bytes, b"\0\0\0\0ike1");
        assert_eq!(got[1].bytes, b"\0\0\0\0ike2");
        assert_eq!((got[1].remote, got[1].local), (r, l));
        assert_eq!(cio::poll::wait_readable(&fds, Duration::from_millis(5)).unwrap(), 0);
        assert!(inbox.drain().is_empty());
    }
}
