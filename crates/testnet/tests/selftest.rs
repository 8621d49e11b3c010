//! The harness tests itself: two hosts ping each other, and nothing survives teardown.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::path::Path;
use std::time::Duration;

use cloister_testnet::{can_create_namespaces, Netns, Veth};

fn exists(name: &str) -> bool {
    Path::new("/var/run/netns").join(name).exists()
}

fn skip() -> bool {
    if can_create_namespaces() {
        return false;
    }
    cloister_testnet::skip("needs root and `ip netns`");
    true
}

#[test]
fn two_hosts_ping_over_ipv4_and_ipv6_and_vanish_on_drop() {
    if skip() {
        return;
    }
    let (na, nb);
    {
        let a = Netns::new("a").unwrap();
        let b = Netns::new("b").unwrap();
        Veth::connect(&a, "eth0", &b, "eth0").unwrap();
        a.add_addr("eth0", "198.18.1.1/24").unwrap();
        b.add_addr("eth0", "198.18.1.2/24").unwrap();
        a.add_addr("eth0", "2001:db8:1::1/64").unwrap();
        b.add_addr("eth0", "2001:db8:1::2/64").unwrap();
        assert!(a.ping("198.18.1.2", 2).unwrap(), "IPv4 ping a -> b");
        assert!(b.ping("2001:db8:1::1", 2).unwrap(), "IPv6 ping b -> a");
        na = a.name().to_owned();
        nb = b.name().to_owned();
        assert!(exists(&na) && exists(&nb));
    }
    assert!(!exists(&na) && !exists(&nb), "namespaces left behind");
}

#[test]
fn supervised_process_is_ended_by_pid_on_drop() {
    if skip() {
        return;
    }
    let ns = Netns::new("proc").unwrap();
    let mut p = ns.spawn("sleeper", &["sh", "-c", "echo ready; exec sleep 60"]).unwrap();
    p.wait_for_log("ready", Duration::from_secs(5)).unwrap();
    let pid = p.pid();
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    drop(p);
    // Reaped by the drop, so the PID is gone (not a zombie).
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "pid {pid} survived");
}

#[test]
fn teardown_runs_when_the_test_panics() {
    if skip() {
        return;
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let r = std::thread::spawn(move || {
        let ns = Netns::new("panic").unwrap();
        let _p = ns.spawn("sleeper", &["sleep", "60"]).unwrap();
        tx.send(ns.name().to_owned()).unwrap();
        panic!("deliberate panic inside a test network");
    })
    .join();
    assert!(r.is_err());
    let name = rx.recv().unwrap();
    assert!(!exists(&name), "namespace {name} survived a panic");
}

#[test]
fn addresses_outside_test_ranges_are_refused() {
    if skip() {
        return;
    }
    let ns = Netns::new("addr").unwrap();
    assert!(ns.add_addr("lo", "10.1.1.1/32").is_err());
    assert!(ns.add_route("default", "192.168.0.1").is_err());
}

#[test]
fn wait_for_log_fails_fast_when_the_process_exits() {
    if skip() {
        return;
    }
    let ns = Netns::new("exit").unwrap();
    let mut p = ns.spawn("quitter", &["sh", "-c", "echo bye; exit 1"]).unwrap();
    let e = p.wait_for_log("never printed", Duration::from_secs(10)).unwrap_err();
    assert!(e.to_string().contains("exited"), "{e}");
}
