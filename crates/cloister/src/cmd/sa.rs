//! `cloister sa ...`: asks a running gateway over its control socket, like `swanctl`; with
//! `--tenant`, asks the multi-tenant service's API about that tenant instead.

use std::path::PathBuf;

use gateway::config::DEFAULT_CONTROL_SOCKET;

/// Arguments of `cloister sa`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The gateway's control socket.
    #[arg(long, default_value = DEFAULT_CONTROL_SOCKET)]
    socket: PathBuf,
    /// A tenant of the multi-tenant service (`cloister serve`): ask its API, not a socket.
    #[arg(long)]
    tenant: Option<String>,
    #[command(flatten)]
    api: super::service::ApiArgs,
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// IKE and child SAs with their usage (never keys), like `swanctl --list-sas`.
    List,
    /// The IKE engine's drops and refusals and the data plane's counters.
    Counters,
    /// Start a configured connection as initiator.
    Initiate {
        /// The connection's name.
        connection: String,
    },
    /// Rekey a child SA now (CREATE_CHILD_SA).
    RekeyChild {
        /// Its inbound SPI, in hex, as `sa list` prints it.
        spi: String,
    },
    /// Rekey an IKE SA now (CREATE_CHILD_SA); its child SAs move to the new one.
    RekeyIke {
        /// Its number, as `sa list` prints it (`#N`).
        id: String,
    },
    /// Delete an IKE SA and its child SAs.
    TerminateIke {
        /// Its number, as `sa list` prints it (`#N`).
        id: String,
    },
}

/// Runs `cloister sa`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let request = match &args.what {
        What::List => "list".to_owned(),
        What::Counters => "counters".to_owned(),
        What::Initiate { connection } => format!("initiate {connection}"),
        What::RekeyChild { spi } => format!("rekey-child {spi}"),
        What::RekeyIke { id } => format!("rekey-ike {id}"),
        What::TerminateIke { id } => format!("terminate-ike {id}"),
    };
    if let Some(t) = &args.tenant {
        return over_api(&args, t);
    }
    let reply = gateway::control::call(&args.socket, &request)?;
    print!("{reply}");
    anyhow::ensure!(!reply.starts_with("error:"), "the gateway refused the request");
    Ok(())
}

/// `sa list` and `sa initiate` of one tenant of the service, over its API.
fn over_api(args: &Args, tenant: &str) -> anyhow::Result<()> {
    let client = args.api.client()?;
    match &args.what {
        What::List => {
            let r = client.get(&format!("/v1/tenants/{tenant}/sas?format=text"))?;
            anyhow::ensure!(r.status == 200, "API: {} {}", r.status, r.body.trim());
            print!("{}", r.body);
        }
        What::Initiate { connection } => {
            let v = client.request("POST", &format!("/v1/tenants/{tenant}/initiate/{connection}"), b"", "")?.json()?;
            println!("{}", v["result"].as_str().unwrap_or("?"));
        }
        _ => anyhow::bail!("with --tenant, only list and initiate (the API's routes); rekey and terminate go to a gateway's control socket"),
    }
    Ok(())
}
