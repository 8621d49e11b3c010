//! Cloister's durable state behind one trait, so the single-node gateway keeps it in an
//! embedded file and a deployment of several nodes can keep it in etcd.
//!
//! What may be stored is typed ([`Value`]): public configuration, SA metadata, blobs sealed
//! by a tenant's enclave, and tenant secrets wrapped by the tenant. There is no variant for
//! a clear key, and the two blob kinds are checked for their formats' headers on the way
//! in, so a key cannot end up on disk by accident: the state store is outside the enclave
//! boundary (threat model, B1/B2).
//!
//! Records are addressed by tenant, [`Kind`] and name. Writes of one [`Store::apply`] batch
//! commit atomically and durably: after `kill -9` a reopened store holds every committed
//! batch and nothing of an uncommitted one.

mod embedded;
mod error;
mod value;

pub use embedded::EmbeddedStore;
pub use error::{Error, Result};
pub use value::{Kind, Value, WrappedSecret};

/// Where a record lives: one tenant's record of one kind, by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// The tenant it belongs to.
    pub tenant: u32,
    /// What it is (each kind is its own table).
    pub kind: Kind,
    /// Its name within the tenant and kind (a connection, an SA, a secret).
    pub name: String,
}

impl Key {
    /// A key; `name` must be 1..=255 bytes without control characters.
    pub fn new(tenant: u32, kind: Kind, name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
            return Err(Error::BadName { name: name.escape_debug().to_string() });
        }
        Ok(Self { tenant, kind, name })
    }
}

/// One write of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Sets the record (its value's kind must be the key's).
    Put(Key, Value),
    /// Removes the record if it exists.
    Remove(Key),
    /// Removes every record of a tenant, of every kind.
    RemoveTenant(u32),
}

/// Durable state: configuration, SA metadata and sealed or wrapped blobs, per tenant.
pub trait Store: Send + Sync {
    /// Applies the writes atomically and durably (all or none).
    fn apply(&self, batch: &[Write]) -> Result<()>;

    /// The record, if there is one.
    fn get(&self, key: &Key) -> Result<Option<Value>>;

    /// Every record of `kind` of `tenant` (every tenant with `None`), ordered by tenant, name.
    fn list(&self, tenant: Option<u32>, kind: Kind) -> Result<Vec<(Key, Value)>>;

    /// The tenants that have at least one record, ascending.
    fn tenants(&self) -> Result<Vec<u32>>;

    /// Sets one record.
    fn put(&self, key: Key, value: Value) -> Result<()> {
        self.apply(&[Write::Put(key, value)])
    }

    /// Removes one record; whether it existed.
    fn remove(&self, key: &Key) -> Result<bool> {
        let existed = self.get(key)?.is_some();
        self.apply(&[Write::Remove(key.clone())])?;
        Ok(existed)
    }
}
