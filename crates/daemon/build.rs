//! Compiles nfkit's own `.proto` files (wire-compatible with BESS's
//! `bess.pb`) with `protox`, a pure-Rust compiler, so no system `protoc`
//! is needed; tonic-prost-build writes the Rust code into OUT_DIR (never
//! committed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/service.proto",
        "proto/bess_msg.proto",
        "proto/module_msg.proto",
        "proto/ports/port_msg.proto",
        "proto/error.proto",
        "proto/util_msg.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    // The descriptors too: module arguments and commands are read by
    // reflection (any bess.pb message into nfkit's argument records).
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("bess_descriptors.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    // Without the `grpc` feature: the messages only (no tonic code).
    let grpc = std::env::var_os("CARGO_FEATURE_GRPC").is_some();
    tonic_prost_build::configure()
        .build_client(grpc)
        .build_server(grpc)
        .compile_fds(fds)?;
    Ok(())
}
