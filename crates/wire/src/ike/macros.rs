//! The `registry!` macro: one style for every IANA registry of the codec.
//!
//! A registry is a `Copy` newtype over its wire integer with one associated const per
//! assigned value (the rustls `enum_builder` idea, without an enum): any received value
//! round-trips unchanged, known or not, and `Debug` prints the IANA name or `Unknown(0x..)`.
//! An enum with an `Unknown(u8)` arm would do the same, but two spellings of one value
//! (`Sa` and `Unknown(0x21)`) could then compare unequal.

/// Declares an IANA registry newtype (see the module documentation).
macro_rules! registry {
    (
        $(#[$meta:meta])*
        pub struct $name:ident($repr:ty) {
            $(
                $(#[$cmeta:meta])*
                $cname:ident = $value:literal,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub $repr);

        impl $name {
            $(
                $(#[$cmeta])*
                pub const $cname: Self = Self($value);
            )*

            /// Every value this build has a name for, in registry order.
            pub const KNOWN: &'static [Self] = &[$(Self::$cname),*];

            /// The IANA name of this value, or `None` when this build does not know it.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($value => Some(stringify!($cname)),)*
                    _ => None,
                }
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    // Two hex digits per octet of the wire field, so the width tells its size.
                    None => write!(
                        f,
                        "Unknown({:#0width$x})",
                        self.0,
                        width = 2 + 2 * core::mem::size_of::<$repr>()
                    ),
                }
            }
        }

        impl From<$repr> for $name {
            fn from(value: $repr) -> Self {
                Self(value)
            }
        }

        impl From<$name> for $repr {
            fn from(value: $name) -> Self {
                value.0
            }
        }
    };
}

pub(crate) use registry;
