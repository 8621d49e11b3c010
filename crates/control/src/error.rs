//! The service's errors. Each maps to one HTTP status in the API; none quotes a secret.

/// This crate's result.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// Why a service operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration is refused (the message names the field, and the line where known).
    #[error("config {field}{}: {why}", line.map(|l| format!(" (line {l})")).unwrap_or_default())]
    Config {
        /// The line in the text given, 1-based, when found.
        line: Option<usize>,
        /// The dotted field.
        field: String,
        /// Why.
        why: String,
    },
    /// Two tenants would share something that must be theirs alone.
    #[error("duplicate {what}")]
    Duplicate {
        /// What is shared.
        what: String,
    },
    /// No tenant (or secret, or connection) of that name.
    #[error("unknown {what}")]
    Unknown {
        /// What was asked for.
        what: String,
    },
    /// The tenant's gateway is not running (starting, recovering or failed).
    #[error("tenant {tenant} is not running: {why}")]
    NotRunning {
        /// The tenant.
        tenant: String,
        /// Its state.
        why: String,
    },
    /// Provisioning was refused (by the enclave, or on the tenant's side).
    #[error("provisioning refused: {0}")]
    Provisioning(String),
    /// The tenant's enclave or gateway failed.
    #[error("tenant {tenant}: {why}")]
    Tenant {
        /// The tenant.
        tenant: String,
        /// What failed.
        why: String,
    },
    /// A live move failed or was refused (the tenant keeps serving where it was).
    #[error("move: {0}")]
    Migration(String),
    /// The state store failed.
    #[error("state store: {0}")]
    Store(#[from] store::Error),
    /// A file or socket operation failed.
    #[error("{what}: {why}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS's message.
        why: String,
    },
    /// The API refused a request or a client got an error back.
    #[error("API: {status} {why}")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The reason given.
        why: String,
    },
    /// A bug: an invariant did not hold.
    #[error("internal error: {what}")]
    Internal {
        /// Which.
        what: String,
    },
}

impl Error {
    /// Adds the line of a configuration error, looked up in `text` (whose tenant table is
    /// at `prefix`, or at the top for a tenant given alone).
    pub(crate) fn located(self, text: &str, prefix: &[&str]) -> Self {
        match self {
            Self::Config { line: None, field, why } => {
                let parts: Vec<&str> = field.split('.').filter(|p| !p.is_empty()).collect();
                let path: Vec<&str> = if prefix.is_empty() && parts.first() == Some(&"tenants") {
                    parts.iter().skip(2).copied().collect()
                } else {
                    parts.clone()
                };
                let line = crate::config::line_of(text, &path).or_else(|| {
                    (!path.is_empty())
                        .then(|| crate::config::line_of(text, &path[..path.len().saturating_sub(1)]))
                        .flatten()
                });
                Self::Config { line, field, why }
            }
            other => other,
        }
    }

    /// The HTTP status the API answers with.
    pub fn status(&self) -> u16 {
        match self {
            Self::Config { .. } => 400,
            Self::Duplicate { .. } => 409,
            Self::Unknown { .. } => 404,
            Self::NotRunning { .. } => 503,
            Self::Provisioning(_) => 422,
            Self::Migration(_) => 409,
            Self::Api { status, .. } => *status,
            Self::Tenant { .. } | Self::Store(_) | Self::Io { .. } | Self::Internal { .. } => 500,
        }
    }
}
