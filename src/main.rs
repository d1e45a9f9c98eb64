//! The `opbound` command: everything it does lives in the library, behind [`opbound::run`].

fn main() -> std::process::ExitCode {
    opbound::run()
}
