//! A generational slot table: handles in, entries out, with precise refusals.
//!
//! Entries are boxed so that growing the slot vector moves only pointers, never key bytes
//! (a moved-from copy of a key could not be zeroized). Freeing an entry drops its box,
//! which runs the entry's zeroizing `Drop`.

use enclave_api::error::{Error, Result};
use enclave_api::handle::HandleKind;

/// Most entries any table can index (16-bit slot index).
pub(crate) const MAX_ENTRIES: usize = 0xFFFF;

struct Slot<T> {
    generation: u8,
    entry: Option<Box<T>>,
}

pub(crate) struct Table<T> {
    kind: HandleKind,
    tag: u8,
    max: usize,
    slots: Vec<Slot<T>>,
    free: Vec<u16>,
    live: usize,
}

impl<T> Table<T> {
    pub(crate) fn new(kind: HandleKind, tag: u8, max: usize) -> Self {
        Self { kind, tag, max: max.min(MAX_ENTRIES), slots: Vec::new(), free: Vec::new(), live: 0 }
    }

    fn handle(&self, index: u16, generation: u8) -> u32 {
        (u32::from(self.tag) << 24) | (u32::from(generation) << 16) | u32::from(index)
    }

    pub(crate) fn insert(&mut self, value: T) -> Result<u32> {
        if self.live >= self.max {
            return Err(Error::TableFull { kind: self.kind, max: self.max });
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                let i = u16::try_from(self.slots.len())
                    .map_err(|_| Error::TableFull { kind: self.kind, max: self.max })?;
                self.slots.push(Slot { generation: 0, entry: None });
                i
            }
        };
        let slot = self.slots.get_mut(usize::from(index)).ok_or(Error::Internal { what: "slot table" })?;
        slot.entry = Some(Box::new(value));
        let generation = slot.generation;
        self.live += 1;
        Ok(self.handle(index, generation))
    }

    fn locate(&self, handle: u32) -> Result<usize> {
        let tag = handle.to_be_bytes()[0];
        if tag != self.tag {
            return Err(Error::ForeignHandle { kind: self.kind, handle });
        }
        let [_, generation, hi, lo] = handle.to_be_bytes();
        let index = usize::from(u16::from_be_bytes([hi, lo]));
        match self.slots.get(index) {
            Some(s) if s.generation == generation && s.entry.is_some() => Ok(index),
            _ => Err(Error::UnknownHandle { kind: self.kind, handle }),
        }
    }

    pub(crate) fn get(&self, handle: u32) -> Result<&T> {
        let i = self.locate(handle)?;
        self.slots
            .get(i)
            .and_then(|s| s.entry.as_deref())
            .ok_or(Error::UnknownHandle { kind: self.kind, handle })
    }

    pub(crate) fn get_mut(&mut self, handle: u32) -> Result<&mut T> {
        let i = self.locate(handle)?;
        let kind = self.kind;
        self.slots
            .get_mut(i)
            .and_then(|s| s.entry.as_deref_mut())
            .ok_or(Error::UnknownHandle { kind, handle })
    }

    /// Takes the entry out (the caller drops it, zeroizing it) and retires the handle.
    pub(crate) fn remove(&mut self, handle: u32) -> Result<Box<T>> {
        let i = self.locate(handle)?;
        let kind = self.kind;
        let slot = self.slots.get_mut(i).ok_or(Error::UnknownHandle { kind, handle })?;
        let entry = slot.entry.take().ok_or(Error::UnknownHandle { kind, handle })?;
        slot.generation = slot.generation.wrapping_add(1);
        self.live -= 1;
        // `i` came from a 16-bit index in `locate`.
        self.free.push(u16::try_from(i).map_err(|_| Error::Internal { what: "slot table" })?);
        Ok(entry)
    }

    /// Drops every entry (each zeroizes itself) and retires every handle.
    pub(crate) fn clear(&mut self) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.entry.take().is_some() {
                slot.generation = slot.generation.wrapping_add(1);
                if let Ok(i) = u16::try_from(i) {
                    self.free.push(i);
                }
            }
        }
        self.live = 0;
    }

    pub(crate) fn live(&self) -> usize {
        self.live
    }

    pub(crate) fn entries(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| s.entry.as_deref())
    }

    /// Live entries with their handles, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            // Slot indices are 16-bit by construction (`insert`).
            let index = u16::try_from(i).ok()?;
            s.entry.as_deref().map(|e| (self.handle(index, s.generation), e))
        })
    }

    /// Live entries, mutable.
    pub(crate) fn entries_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(|s| s.entry.as_deref_mut())
    }

    /// How many more entries fit.
    pub(crate) fn room(&self) -> usize {
        self.max - self.live
    }

    /// Bytes of the slot and free-list arrays themselves (not the boxed entries).
    pub(crate) fn overhead_bytes(&self) -> usize {
        self.slots.capacity() * core::mem::size_of::<Slot<T>>()
            + self.free.capacity() * core::mem::size_of::<u16>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_foreign_and_unknown_handles_are_refused() {
        let mut t = Table::new(HandleKind::EspSa, 0x5a, 4);
        let h = t.insert(7u32).unwrap();
        assert_eq!(*t.get(h).unwrap(), 7);
        assert_eq!(t.remove(h).map(|b| *b), Ok(7));
        assert_eq!(t.get(h), Err(Error::UnknownHandle { kind: HandleKind::EspSa, handle: h }));
        let h2 = t.insert(8).unwrap();
        assert_ne!(h, h2, "a reused slot gets a new generation");
        let foreign = (h2 & 0x00FF_FFFF) | (0x11 << 24);
        assert_eq!(t.get(foreign), Err(Error::ForeignHandle { kind: HandleKind::EspSa, handle: foreign }));
        assert!(t.get(0x5a00_0100).is_err());
    }

    #[test]
    fn table_refuses_past_its_limit() {
        let mut t = Table::new(HandleKind::Dh, 1, 2);
        t.insert(()).unwrap();
        t.insert(()).unwrap();
        assert_eq!(t.insert(()), Err(Error::TableFull { kind: HandleKind::Dh, max: 2 }));
        assert_eq!(t.live(), 2);
    }
}
