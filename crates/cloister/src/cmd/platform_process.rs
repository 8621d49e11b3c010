//! `cloister platform-process` (hidden): the software platform of one `cloister serve` or
//! `cloister gateway`.
//!
//! Only those start it (`cloister_platform::PlatformClient::start`), handing it its end of
//! the launch channel as an inherited descriptor. It holds the attestation key, the roots
//! and the tenants' ledgers, and starts every enclave process of its caller as
//! `/proc/self/exe enclave-process ...`; the caller holds none of them.

use std::path::PathBuf;

/// Arguments of `cloister platform-process`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("root").required(true).args(["sealing_root", "provisioning_key"])))]
pub(crate) struct Args {
    /// The platform's sealing root (made on first use), from which each tenant's root is
    /// derived (`cloister serve`); the ledgers lie beside it.
    #[arg(long, requires = "attestation_key")]
    sealing_root: Option<PathBuf>,
    /// The platform's attestation key (PKCS#8, made on first use); without it (one tenant's
    /// gateway) each start makes a fresh one.
    #[arg(long)]
    attestation_key: Option<PathBuf>,
    /// One tenant's own root (`cloister gateway`: `provisioning_key`): the platform then
    /// starts that tenant's enclaves only.
    #[arg(long, requires_all = ["tenant", "ledger_dir"])]
    provisioning_key: Option<PathBuf>,
    /// The tenant of `--provisioning-key`.
    #[arg(long)]
    tenant: Option<u32>,
    /// Where the tenant's ledger lies, with `--provisioning-key`.
    #[arg(long)]
    ledger_dir: Option<PathBuf>,
    /// Runs tenant T's enclave process as user and group N + T (the platform must start as
    /// root); without it, as the platform's own user.
    #[arg(long)]
    enclave_uid_base: Option<u32>,
    /// One argument of the HSM agent (`cloister hsm-agent`), repeated in order; the
    /// platform adds `--platform-key` with its own key. Without any, it starts no agent.
    #[arg(long = "hsm-agent-arg", allow_hyphen_values = true)]
    hsm_agent_args: Vec<std::ffi::OsString>,
    /// Runs the HSM agent as user and group N (the platform must start as root).
    #[arg(long, requires = "hsm_agent_args")]
    hsm_agent_uid: Option<u32>,
    /// The inherited descriptor of the launch channel.
    #[arg(long)]
    channel_fd: i32,
}

/// Runs the platform until its caller closes the channel.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let enclave =
        platform::EnclaveProgram { program: "/proc/self/exe".into(), args: vec!["enclave-process".into()] };
    let roots = match (args.sealing_root, args.provisioning_key, args.tenant, args.ledger_dir) {
        (Some(sealing_root), None, _, _) => platform::Roots::Sealing { sealing_root },
        (None, Some(key), Some(tenant), Some(ledger_dir)) => {
            platform::Roots::Tenant { tenant, key, ledger_dir }
        }
        _ => anyhow::bail!("--sealing-root, or --provisioning-key with --tenant and --ledger-dir"),
    };
    let agent = (!args.hsm_agent_args.is_empty()).then(|| {
        let mut a = vec![std::ffi::OsString::from("hsm-agent")];
        a.extend(args.hsm_agent_args);
        platform::AgentProgram {
            program: "/proc/self/exe".into(),
            args: a,
            user: args.hsm_agent_uid.map(|uid| enclave_host::Credentials { uid, gid: uid }),
        }
    });
    match platform::run(
        args.channel_fd,
        args.attestation_key.as_deref(),
        &roots,
        &enclave,
        args.enclave_uid_base,
        agent.as_ref(),
    ) {
        0 => Ok(()),
        code => anyhow::bail!("the platform process stopped (status {code})"),
    }
}
