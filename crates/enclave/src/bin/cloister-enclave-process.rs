//! `cloister-enclave-process`: the enclave process's program for this crate's integration
//! tests, which cannot start the `cloister` binary. It runs exactly what
//! `cloister enclave-process` runs: [`cloister_enclave::process::guest::main`] over its
//! command line. Started only by [`cloister_enclave_host::ProcessEnclave`].
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    match cloister_enclave::process::guest::main(std::env::args_os().skip(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Never key bytes: process errors carry numbers and reasons only.
            eprintln!("cloister-enclave-process: {e}");
            ExitCode::from(2)
        }
    }
}
