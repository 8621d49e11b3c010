//! The embedded backend: one redb file, one table per [`Kind`], keyed by (tenant, name).
//! Every batch is one write transaction committed with fsync (redb's immediate durability),
//! so a crash or `kill -9` loses no committed batch and exposes no half of one.

use std::path::Path;

use redb::{Database, ReadableTable, TableDefinition};

use crate::{Error, Key, Kind, Result, Store, Value, Write};

type Table = TableDefinition<'static, (u32, &'static str), &'static [u8]>;

fn table(kind: Kind) -> Table {
    TableDefinition::new(kind.table())
}

/// A store in one local file (the single-node default).
pub struct EmbeddedStore {
    db: Database,
    path: String,
}

impl core::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("EmbeddedStore").field("path", &self.path).finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// Opens the store file, creating it (and its tables) if it does not exist. Only one
    /// process may have it open: a second one gets [`Error::Io`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let shown = path.as_ref().display().to_string();
        let io = |e: &dyn std::fmt::Display| Error::Io { path: shown.clone(), why: e.to_string() };
        let db = Database::create(path.as_ref()).map_err(|e| io(&e))?;
        let tx = db.begin_write().map_err(|e| io(&e))?;
        for kind in Kind::ALL {
            tx.open_table(table(kind)).map_err(|e| io(&e))?;
        }
        tx.commit().map_err(|e| io(&e))?;
        Ok(Self { db, path: shown })
    }

    fn io(&self, e: impl std::fmt::Display) -> Error {
        Error::Io { path: self.path.clone(), why: e.to_string() }
    }

    fn corrupt(tenant: u32, kind: Kind, name: &str, why: &'static str) -> Error {
        Error::Corrupt { key: format!("{tenant}/{}/{name}", kind.table()), why }
    }
}

impl Store for EmbeddedStore {
    fn apply(&self, batch: &[Write]) -> Result<()> {
        // Check everything before the transaction: a refused write leaves no trace.
        for w in batch {
            if let Write::Put(key, value) = w {
                if key.kind != value.kind() {
                    return Err(Error::KindMismatch { key: key.kind, value: value.kind() });
                }
                value.encode()?;
            }
        }
        let tx = self.db.begin_write().map_err(|e| self.io(e))?;
        for w in batch {
            match w {
                Write::Put(key, value) => {
                    let mut t = tx.open_table(table(key.kind)).map_err(|e| self.io(e))?;
                    t.insert((key.tenant, key.name.as_str()), value.encode()?).map_err(|e| self.io(e))?;
                }
                Write::Remove(key) => {
                    let mut t = tx.open_table(table(key.kind)).map_err(|e| self.io(e))?;
                    t.remove((key.tenant, key.name.as_str())).map_err(|e| self.io(e))?;
                }
                Write::RemoveTenant(tenant) => {
                    for kind in Kind::ALL {
                        let mut t = tx.open_table(table(kind)).map_err(|e| self.io(e))?;
                        let mut names = Vec::new();
                        for entry in t.range((*tenant, "")..).map_err(|e| self.io(e))? {
                            let (k, _) = entry.map_err(|e| self.io(e))?;
                            let (owner, name) = k.value();
                            if owner != *tenant {
                                break;
                            }
                            names.push(name.to_owned());
                        }
                        for name in names {
                            t.remove((*tenant, name.as_str())).map_err(|e| self.io(e))?;
                        }
                    }
                }
            }
        }
        tx.commit().map_err(|e| self.io(e))
    }

    fn get(&self, key: &Key) -> Result<Option<Value>> {
        let tx = self.db.begin_read().map_err(|e| self.io(e))?;
        let t = tx.open_table(table(key.kind)).map_err(|e| self.io(e))?;
        let Some(v) = t.get((key.tenant, key.name.as_str())).map_err(|e| self.io(e))? else {
            return Ok(None);
        };
        Value::decode(key.kind, v.value())
            .map(Some)
            .map_err(|why| Self::corrupt(key.tenant, key.kind, &key.name, why))
    }

    fn list(&self, tenant: Option<u32>, kind: Kind) -> Result<Vec<(Key, Value)>> {
        let tx = self.db.begin_read().map_err(|e| self.io(e))?;
        let t = tx.open_table(table(kind)).map_err(|e| self.io(e))?;
        let mut out = Vec::new();
        for entry in t.range((tenant.unwrap_or(0), "")..).map_err(|e| self.io(e))? {
            let (k, v) = entry.map_err(|e| self.io(e))?;
            let (owner, name) = k.value();
            if tenant.is_some_and(|t| t != owner) {
                break;
            }
            let value =
                Value::decode(kind, v.value()).map_err(|why| Self::corrupt(owner, kind, name, why))?;
            out.push((Key { tenant: owner, kind, name: name.to_owned() }, value));
        }
        Ok(out)
    }

    fn tenants(&self) -> Result<Vec<u32>> {
        let tx = self.db.begin_read().map_err(|e| self.io(e))?;
        let mut out = std::collections::BTreeSet::new();
        for kind in Kind::ALL {
            let t = tx.open_table(table(kind)).map_err(|e| self.io(e))?;
            for entry in t.iter().map_err(|e| self.io(e))? {
                let (k, _) = entry.map_err(|e| self.io(e))?;
                out.insert(k.value().0);
            }
        }
        Ok(out.into_iter().collect())
    }
}
