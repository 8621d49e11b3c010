//! `cloister-migrate-enclave`: the enclave process's program for this crate's flow test,
//! which cannot start the `cloister` binary (feature `test-enclave`). It runs exactly what
//! `cloister enclave-process` runs, [`enclave_core::process::guest::main`], over its command
//! line. Started only by `cloister_enclave_host::ProcessEnclave`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    match enclave_core::process::guest::main(std::env::args_os().skip(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Never key bytes: process errors carry numbers and reasons only.
            eprintln!("cloister-migrate-enclave: {e}");
            ExitCode::from(2)
        }
    }
}
