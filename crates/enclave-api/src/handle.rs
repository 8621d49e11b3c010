//! Handles: the only names the untrusted side has for keys.
//!
//! A handle is a `u32` that the enclave hands out and checks on every use. It carries three
//! fields so that a stale or forged handle is refused with a precise reason:
//!
//! ```text
//!  31        24 23        16 15                         0
//! +------------+------------+----------------------------+
//! | table tag  | generation |        slot index          |
//! +------------+------------+----------------------------+
//! ```
//!
//! * the **tag** is drawn at random when the enclave instance starts (never 0), so a handle
//!   minted by another tenant's enclave is refused as [`crate::Error::ForeignHandle`] with
//!   probability 254/255; when tags collide it is refused as unknown or stale, or names one of
//!   *this* tenant's own keys, which the caller could have named anyway. Tenant isolation
//!   does not rest on the tag: each tenant's keys live in its own instance's tables.
//! * the **generation** is bumped each time a slot is freed, so a handle used after deletion
//!   is refused (until the 8-bit generation wraps after 256 reuses of one slot).
//! * the **index** bounds each table at 65,535 live entries per tenant.

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl $name {
            /// The raw value, as it crosses the boundary in a descriptor.
            pub const fn raw(self) -> u32 {
                self.0
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, concat!(stringify!($name), "({:#010x})"), self.0)
            }
        }
    };
}

handle!(
    /// An established IKE SA's keys (SK_d, SK_a*, SK_e*, SK_p*) inside the enclave.
    IkeSaHandle
);
handle!(
    /// One direction of an ESP SA (a child SA has one inbound and one outbound).
    EspSaHandle
);
handle!(
    /// An ephemeral Diffie-Hellman private value, consumed by the agreement that uses it.
    DhHandle
);
handle!(
    /// A provisioned tenant secret: a pre-shared key or a private signing key.
    SecretHandle
);

/// Which table a handle names, for error reports and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HandleKind {
    /// [`IkeSaHandle`].
    IkeSa,
    /// [`EspSaHandle`].
    EspSa,
    /// [`DhHandle`].
    Dh,
    /// [`SecretHandle`].
    Secret,
}

impl core::fmt::Display for HandleKind {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Self::IkeSa => "IKE SA",
            Self::EspSa => "ESP SA",
            Self::Dh => "DH",
            Self::Secret => "secret",
        })
    }
}

/// The tenant an enclave instance serves; bound into provisioning and sealed blobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(pub u32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_prints_only_the_handle_value() {
        assert_eq!(format!("{:?}", EspSaHandle(0x0102_0003)), "EspSaHandle(0x01020003)");
    }
}
