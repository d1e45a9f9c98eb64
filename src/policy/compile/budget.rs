//! The counter budget: every bound's table (`max-keys`) must fit `--max-counters` together, and
//! when they do not the error says which kinds of bound ask for what.

use std::collections::BTreeMap;

use super::Compiler;
use crate::finding::Finding;
use crate::numbers::thousands;
use crate::policy::Scope;

impl Compiler {
    /// The sum of `max-keys` over every table must fit `--max-counters`.
    pub(super) fn budget(&mut self, max_counters: u64) {
        let total: u64 = self.bounds.iter().map(|b| u64::from(b.def.table_size())).sum();
        if total <= max_counters {
            return;
        }
        let mut groups: BTreeMap<(u8, std::cmp::Reverse<u32>), u64> = BTreeMap::new();
        for b in &self.bounds {
            let kind = match b.scope {
                Scope::Route => 0,
                Scope::Policy(_) => 1,
                Scope::Tag(_) => 2,
                Scope::Operation(_) => 3,
            };
            *groups.entry((kind, std::cmp::Reverse(b.def.table_size()))).or_default() += 1;
        }
        let parts: Vec<String> = groups
            .iter()
            .map(|(&(kind, std::cmp::Reverse(size)), &count)| {
                let names = [
                    ("route bound", "route bounds"),
                    ("policy", "policies"),
                    ("tag bound", "tag bounds"),
                    ("operation bound", "operation bounds"),
                ];
                let (one, many) = names[usize::from(kind)];
                let what = if count == 1 { one } else { many };
                format!(
                    "{count} {what} of {} keys = {}",
                    thousands(u64::from(size)),
                    thousands(count * u64::from(size))
                )
            })
            .collect();
        self.findings.push(Finding::error(
            "",
            format!(
                "the bounds ask for {} counters, over the budget of {} (--max-counters): {}; lower max-keys on some bounds or raise --max-counters",
                thousands(total),
                thousands(max_counters),
                parts.join(", ")
            ),
        ));
    }
}
