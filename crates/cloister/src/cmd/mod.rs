//! One module per subcommand.
pub(crate) mod dataplane;
pub(crate) mod decode;
pub(crate) mod enclave_process;
pub(crate) mod gateway;
pub(crate) mod hsm_agent;
pub(crate) mod ike_load;
pub(crate) mod migrate;
pub(crate) mod platform_process;
pub(crate) mod sa;
pub(crate) mod secret;
pub(crate) mod service;
pub(crate) mod simulate;
