//! `cloister`: the one binary. It parses arguments and hands each subcommand to its crate.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

mod cmd;

/// Cloister: a confidential, multi-tenant, elastic IPsec VPN gateway.
#[derive(Debug, Parser)]
#[command(name = "cloister", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the ESP data plane from a static SA configuration until SIGINT/SIGTERM.
    Dataplane(cmd::dataplane::Args),
    /// Decode an IKEv2 message or ESP/IP packet given as hex or a file, and print its structure.
    Decode(cmd::decode::Args),
    /// Run one tenant's gateway (IKE, ESP data plane, enclave) until SIGINT/SIGTERM.
    Gateway(cmd::gateway::Args),
    /// Load-test an IKEv2 responder: N tunnels with PSK, a window under way; rate and setup times.
    IkeLoad(cmd::ike_load::Args),
    /// Ask a running gateway: list SAs, initiate, rekey, terminate.
    Sa(cmd::sa::Args),
    /// Wrap a tenant secret (PSK, private key, static ESP SA keys) for the tenant's enclave.
    Secret(cmd::secret::Args),
    /// Run one tenant's hardened enclave process (started by the gateway, not by hand).
    #[command(hide = true)]
    EnclaveProcess(cmd::enclave_process::Args),
    /// Run the software platform of `serve`: the one process that holds the attestation key,
    /// the sealing root and the ledgers, and starts the enclave processes (started by `serve`).
    #[command(hide = true)]
    PlatformProcess(cmd::platform_process::Args),
    /// Run the HSM agent, the one process that holds the HSM PIN (started by `serve`).
    #[command(hide = true)]
    HsmAgent(cmd::hsm_agent::Args),
    /// Simulate elastic provisioning on a throughput trace; print tables, write plots.
    Simulate(cmd::simulate::Args),
    /// Run the multi-tenant service: each tenant's gateway over its own enclave process, the API.
    Serve(cmd::service::ServeArgs),
    /// The service's state and its tenants (over the API).
    Status(cmd::service::ApiArgs),
    /// Every tenant with its state, enclave process and secrets (over the API).
    Tenants(cmd::service::ApiArgs),
    /// Every tenant's IKE and child SAs with their traffic (over the API).
    Tunnels(cmd::service::ApiArgs),
    /// The service's Prometheus metrics (over the API, as a scraper gets them).
    Metrics(cmd::service::ApiArgs),
    /// Add, remove or show a tenant; provision a tenant's secret by attestation.
    Tenant(cmd::service::TenantArgs),
    /// Print the measurement a tenant should expect of its enclave on this binary.
    Measure(cmd::service::MeasureArgs),
    /// Run the configuration and attestation service: tenants' configurations and secrets,
    /// released only to gateways whose tenant enclave attests.
    Cas(cmd::service::CasArgs),
    /// Print this host's platform evidence key (made on first use, as `serve` would).
    PlatformKey(cmd::service::PlatformKeyArgs),
    /// Move a tenant with its tunnels to another host; verify the HSM audit log.
    Migrate(cmd::migrate::Args),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Dataplane(args) => cmd::dataplane::run(args),
        Command::Decode(args) => cmd::decode::run(args),
        Command::EnclaveProcess(args) => cmd::enclave_process::run(args),
        Command::HsmAgent(args) => cmd::hsm_agent::run(args),
        Command::PlatformProcess(args) => cmd::platform_process::run(args),
        Command::Gateway(args) => cmd::gateway::run(args),
        Command::IkeLoad(args) => cmd::ike_load::run(args),
        Command::Sa(args) => cmd::sa::run(args),
        Command::Secret(args) => cmd::secret::run(args),
        Command::Simulate(args) => cmd::simulate::run(args),
        Command::Serve(args) => cmd::service::serve(args),
        Command::Status(args) => cmd::service::status(args),
        Command::Tenants(args) => cmd::service::tenants(args),
        Command::Tunnels(args) => cmd::service::tunnels(args),
        Command::Metrics(args) => cmd::service::metrics(args),
        Command::Tenant(args) => cmd::service::tenant(args),
        Command::Measure(args) => cmd::service::measure(args),
        Command::Cas(args) => cmd::service::cas(args),
        Command::PlatformKey(args) => cmd::service::platform_key(args),
        Command::Migrate(args) => cmd::migrate::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line with the chain of causes; a backtrace helps developers, not operators.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
