//! How the ESP core reaches the enclave: a [`Crossing`] lends it the enclave for a stretch
//! of work. Anything that crosses ([`EspCrossing`]: any `Enclave`, or a lane of one) is
//! one; [`SharedEnclave`] is one enclave instance that several workers share behind a
//! mutex, taken for each stretch.
//!
//! A worker with a lane of its own (`Enclave::esp_lane`) needs no lock: lanes of one
//! instance run their batches at once, and the enclave takes one SA's numbers from them in
//! any order within its window, never one twice. Behind a [`SharedEnclave`], encapsulation
//! holds the enclave for its whole call, so one SA's sequence numbers reach the enclave in
//! the order they were drawn, whichever worker drew them (a worker waiting at the lock with
//! numbers in hand could fall behind that window). Decapsulation holds it for each crossing
//! only: its checks before and its commits after the crossing are safe across workers
//! without it.

use std::sync::Mutex;

use enclave::EspCrossing;

/// Something that lends the ESP core an enclave for a stretch of work.
pub trait Crossing {
    /// The enclave (or lane) lent.
    type Target: EspCrossing + ?Sized;

    /// Runs `f` with the enclave to itself; `None` (and `f` not run) when the enclave is
    /// unavailable.
    fn with<R>(&mut self, f: impl FnOnce(&mut Self::Target) -> R) -> Option<R>;
}

impl<E: EspCrossing + ?Sized> Crossing for E {
    type Target = E;

    fn with<R>(&mut self, f: impl FnOnce(&mut E) -> R) -> Option<R> {
        Some(f(self))
    }
}

/// An enclave shared by workers behind a mutex, taken for each stretch.
#[derive(Debug)]
pub struct SharedEnclave<'a, E: ?Sized> {
    enclave: &'a Mutex<E>,
    poisoned: bool,
}

impl<'a, E: ?Sized> SharedEnclave<'a, E> {
    /// Stretches of work with `enclave`, one lock each.
    pub fn new(enclave: &'a Mutex<E>) -> Self {
        Self { enclave, poisoned: false }
    }

    /// Whether a stretch found the lock poisoned (a worker panicked while holding it): that
    /// stretch did not run, and the caller should stop.
    pub fn poisoned(&self) -> bool {
        self.poisoned
    }
}

impl<E: EspCrossing + ?Sized> Crossing for SharedEnclave<'_, E> {
    type Target = E;

    fn with<R>(&mut self, f: impl FnOnce(&mut E) -> R) -> Option<R> {
        let Ok(mut enclave) = self.enclave.lock() else {
            self.poisoned = true;
            return None;
        };
        Some(f(&mut enclave))
    }
}
