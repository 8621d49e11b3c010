//! What a record may hold. Secrets only ever as ciphertext: blobs sealed by an enclave or
//! wrapped by the tenant, each recognised by its format's header.

use crate::{Error, Result};
use enclave::SealedBlob;

/// The kinds of records; each is a table of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Public configuration text (a tenant's connections; secrets are referenced by name).
    Config,
    /// Metadata about SAs and tunnels (SPIs, selectors, counters, times): never keys.
    Metadata,
    /// A blob sealed by the tenant's enclave (IKE SA state, sealed secrets).
    Sealed,
    /// A tenant secret wrapped for the tenant's enclave (provisioning blob).
    Wrapped,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 4] = [Kind::Config, Kind::Metadata, Kind::Sealed, Kind::Wrapped];

    /// The table name.
    pub(crate) fn table(self) -> &'static str {
        match self {
            Kind::Config => "config",
            Kind::Metadata => "metadata",
            Kind::Sealed => "sealed",
            Kind::Wrapped => "wrapped",
        }
    }
}

/// A tenant secret as the tenant wrapped it for its enclave (`cloister secret wrap`, or
/// attested provisioning): AES-256-GCM ciphertext with the "CLPV" header.
#[derive(Clone, PartialEq, Eq)]
pub struct WrappedSecret(Vec<u8>);

/// Header (24 bytes) and GCM tag (16) of a provisioning blob; a secret is at least 1 byte.
const WRAPPED_MIN: usize = 24 + 16 + 1;
/// Header and tag of a sealed blob; its contents are never empty.
const SEALED_MIN: usize = 16 + 16 + 1;

impl WrappedSecret {
    /// Checks the provisioning blob's header (magic, version) and length.
    pub fn new(blob: Vec<u8>) -> Result<Self> {
        let why = if blob.len() < WRAPPED_MIN {
            Some("shorter than a header and tag")
        } else if blob.get(..5) != Some(b"CLPV\x01".as_slice()) {
            Some("no \"CLPV\" version 1 header")
        } else {
            None
        };
        match why {
            Some(why) => Err(Error::NotABlob { what: "wrapped secret", why }),
            None => Ok(Self(blob)),
        }
    }

    /// The blob, for the enclave to open.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl core::fmt::Debug for WrappedSecret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "WrappedSecret({} bytes)", self.0.len())
    }
}

/// Checks a sealed blob's header (magic) and length.
fn check_sealed(blob: &SealedBlob) -> Result<()> {
    let why = if blob.0.len() < SEALED_MIN {
        Some("shorter than a header and tag")
    } else if blob.0.get(..4) != Some(b"CLSB".as_slice()) {
        Some("no \"CLSB\" header")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::NotABlob { what: "sealed blob", why }),
        None => Ok(()),
    }
}

/// A record's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Public configuration text.
    Config(String),
    /// SA or tunnel metadata (JSON or another text encoding): never keys.
    Metadata(String),
    /// A blob sealed by an enclave.
    Sealed(SealedBlob),
    /// A tenant secret wrapped for its enclave.
    Wrapped(WrappedSecret),
}

impl Value {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Value::Config(_) => Kind::Config,
            Value::Metadata(_) => Kind::Metadata,
            Value::Sealed(_) => Kind::Sealed,
            Value::Wrapped(_) => Kind::Wrapped,
        }
    }

    /// The bytes stored for it, after checking blobs' headers.
    pub(crate) fn encode(&self) -> Result<&[u8]> {
        match self {
            Value::Config(t) | Value::Metadata(t) => Ok(t.as_bytes()),
            Value::Sealed(b) => check_sealed(b).map(|()| b.0.as_slice()),
            Value::Wrapped(w) => Ok(w.as_bytes()),
        }
    }

    /// The value of `kind` stored as `bytes`.
    pub(crate) fn decode(kind: Kind, bytes: &[u8]) -> core::result::Result<Self, &'static str> {
        let text = || String::from_utf8(bytes.to_vec()).map_err(|_| "text is not UTF-8");
        Ok(match kind {
            Kind::Config => Value::Config(text()?),
            Kind::Metadata => Value::Metadata(text()?),
            Kind::Sealed => {
                let blob = SealedBlob(bytes.to_vec());
                check_sealed(&blob).map_err(|_| "not a sealed blob")?;
                Value::Sealed(blob)
            }
            Kind::Wrapped => {
                Value::Wrapped(WrappedSecret::new(bytes.to_vec()).map_err(|_| "not a wrapped secret")?)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_need_their_headers() {
        let mut wrapped = b"CLPV\x01\x01\0\0".to_vec();
        wrapped.resize(WRAPPED_MIN, 7);
        assert!(WrappedSecret::new(wrapped.clone()).is_ok());
        assert!(WrappedSecret::new(wrapped[..WRAPPED_MIN - 1].to_vec()).is_err(), "too short");
        let mut raw_key = vec![0x42; 64];
        assert!(WrappedSecret::new(raw_key.clone()).is_err(), "a raw key is no wrapped secret");
        raw_key[..4].copy_from_slice(b"CLSB");
        assert!(Value::Sealed(SealedBlob(raw_key)).encode().is_ok());
        assert!(Value::Sealed(SealedBlob(vec![0x42; 64])).encode().is_err());
        assert_eq!(format!("{:?}", WrappedSecret::new(wrapped).unwrap()), "WrappedSecret(41 bytes)");
    }

    #[test]
    fn values_decode_as_they_were_encoded() {
        let mut sealed = b"CLSB".to_vec();
        sealed.resize(40, 1);
        for v in [
            Value::Config("[connections.a]".into()),
            Value::Metadata("{\"spi\":1}".into()),
            Value::Sealed(SealedBlob(sealed)),
        ] {
            let bytes = v.encode().unwrap().to_vec();
            assert_eq!(Value::decode(v.kind(), &bytes), Ok(v));
        }
        assert!(Value::decode(Kind::Config, &[0xff, 0xfe]).is_err());
    }
}
