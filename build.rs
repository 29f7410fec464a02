//! Records what `lavinmq --build-info` prints about the build: the compiler's
//! version, the target and the profile, which Cargo knows only here.

use std::process::Command;

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .unwrap_or_default();
    println!("cargo:rustc-env=LAVINMQ_RUSTC_VERSION={}", version.trim());
    for var in ["TARGET", "PROFILE"] {
        println!(
            "cargo:rustc-env=LAVINMQ_BUILD_{var}={}",
            std::env::var(var).unwrap_or_default()
        );
    }
    println!("cargo:rerun-if-changed=build.rs");
}
