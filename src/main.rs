//! The `opbound` command: everything it does lives in the library, behind [`opbound::run`].

/// mimalloc: a proxy allocates and frees small buffers and header maps on every request, and
/// glibc's malloc spent a large share of serve's user time under load (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    opbound::run()
}
