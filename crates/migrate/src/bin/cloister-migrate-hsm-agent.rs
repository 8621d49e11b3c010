//! `cloister-migrate-hsm-agent`: the HSM agent's program for this crate's tests, which cannot
//! start the `cloister` binary. It runs exactly what `cloister hsm-agent` runs,
//! [`cloister_migrate::agent::serve::main`], over its command line.
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    match cloister_migrate::agent::serve::main(std::env::args_os().skip(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Never the PIN: the agent's errors name files and reasons only.
            eprintln!("cloister-migrate-hsm-agent: {e}");
            ExitCode::from(2)
        }
    }
}
