//! `opbound schema`: the JSON Schema of `x-rate-limit` and `x-rate-limit-policies`.

use super::exit;

#[derive(clap::Args)]
pub(super) struct Args {}

pub(super) fn run(_: Args) -> u8 {
    outln!("{}", crate::policy::SCHEMA.trim_end());
    exit::OK
}
