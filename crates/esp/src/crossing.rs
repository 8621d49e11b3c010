//! How the ESP core reaches the enclave: [`Crossing`], one `esp_batch` call per crossing.
//! Any [`Enclave`] is one; [`SharedEnclave`] is one enclave instance that several workers
//! share, locked for each crossing only, so that their parsing, numbering and header work
//! runs in parallel and only the enclave calls take turns.
//!
//! Why that is safe for outbound sequence numbers: workers draw them from the SA's one
//! counter before they cross, so one SA's batches can reach the enclave out of order. The
//! enclave accepts a number once, in any order, within a window below the highest it used,
//! and refuses a repeat (`EspStatus::SeqReused`), so no IV is ever used twice.

use std::sync::Mutex;

use enclave::{BatchSummary, Enclave, EspDescriptor, EspStatus};

/// Something that runs a batch of ESP descriptors in the enclave.
pub trait Crossing {
    /// Processes `descriptors` over `packets` in one enclave call, one status each
    /// ([`Enclave::esp_batch`]); `None` when the call as a whole did not happen.
    fn run_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Option<BatchSummary>;
}

impl<E: Enclave + ?Sized> Crossing for E {
    fn run_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Option<BatchSummary> {
        Enclave::esp_batch(self, packets, descriptors, status).ok()
    }
}

/// An enclave shared by workers behind a mutex, taken for each crossing.
#[derive(Debug)]
pub struct SharedEnclave<'a, E: ?Sized> {
    enclave: &'a Mutex<E>,
    poisoned: bool,
}

impl<'a, E: ?Sized> SharedEnclave<'a, E> {
    /// Crossings into `enclave`, one lock each.
    pub fn new(enclave: &'a Mutex<E>) -> Self {
        Self { enclave, poisoned: false }
    }

    /// Whether a crossing found the lock poisoned (a worker panicked inside an enclave
    /// call): that crossing did not happen, and the caller should stop.
    pub fn poisoned(&self) -> bool {
        self.poisoned
    }
}

impl<E: Enclave + ?Sized> Crossing for SharedEnclave<'_, E> {
    fn run_batch(
        &mut self,
        packets: &mut [u8],
        descriptors: &[EspDescriptor],
        status: &mut [EspStatus],
    ) -> Option<BatchSummary> {
        let Ok(mut enclave) = self.enclave.lock() else {
            self.poisoned = true;
            return None;
        };
        Enclave::esp_batch(&mut *enclave, packets, descriptors, status).ok()
    }
}
