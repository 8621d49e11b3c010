//! Fixed-capacity key buffers: no heap, no `Clone`, no `Debug`, zeroized on drop.

use enclave_api::error::{Error, Result};
use zeroize::{Zeroize, ZeroizeOnDrop};

/// Up to `N` key bytes. Fixed capacity so per-SA state has a fixed, reportable size and
/// never reallocates (a reallocation would leave an unzeroized copy behind).
#[derive(Zeroize, ZeroizeOnDrop)]
pub(crate) struct KeyBuf<const N: usize> {
    bytes: [u8; N],
    len: u16,
}

impl<const N: usize> KeyBuf<N> {
    pub(crate) const fn empty() -> Self {
        Self { bytes: [0; N], len: 0 }
    }

    pub(crate) fn from_slice(src: &[u8]) -> Result<Self> {
        let mut k = Self::empty();
        let dst = k.bytes.get_mut(..src.len()).ok_or(Error::Internal { what: "key buffer" })?;
        dst.copy_from_slice(src);
        k.len = u16::try_from(src.len()).map_err(|_| Error::Internal { what: "key buffer" })?;
        Ok(k)
    }

    /// A buffer of `len` zero bytes to be filled through [`Self::as_mut`].
    pub(crate) fn zeroed(len: usize) -> Result<Self> {
        if len > N {
            return Err(Error::Internal { what: "key buffer" });
        }
        let mut k = Self::empty();
        k.len = u16::try_from(len).map_err(|_| Error::Internal { what: "key buffer" })?;
        Ok(k)
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // `len <= N` is an invariant of every constructor.
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }

    pub(crate) fn as_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.len);
        self.bytes.get_mut(..len).unwrap_or(&mut [])
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        usize::from(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keybuf_holds_exactly_what_fits() {
        let k = KeyBuf::<4>::from_slice(&[1, 2, 3]).unwrap();
        assert_eq!(k.as_slice(), &[1, 2, 3]);
        assert!(KeyBuf::<4>::from_slice(&[0; 5]).is_err());
        assert!(KeyBuf::<4>::zeroed(5).is_err());
    }
}
