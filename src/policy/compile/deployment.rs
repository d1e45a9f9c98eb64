//! Deployment warnings: what the way a policy is run (in-memory counts, a decision service)
//! changes about what its bounds can promise.

use super::Compiler;
use crate::finding::Finding;
use crate::policy::{Algorithm, Bound, Options};

impl Compiler {
    pub(super) fn deployment(&mut self, options: &Options) {
        if !self.bounds.is_empty() && !options.shared_store {
            self.findings.push(Finding::warning(
                "",
                "counts are per instance: with the in-memory store each opbound instance counts on its own, so N instances admit up to N times each limit; use --store redis://... to share them",
            ));
        }
        self.counting(options);
        if options.decision_service {
            // One cause however many bounds it reaches: one warning.
            let concurrent: Vec<&Bound> =
                self.bounds.iter().filter(|b| b.def.algorithm == Algorithm::Concurrency).collect();
            let why = "cannot be released through a decision service: opbound decide never sees the response end, so each permit is returned at once; serve this spec with opbound serve, or use a token bucket";
            match concurrent.as_slice() {
                [] => {}
                [b] => {
                    self.findings.push(Finding::warning(b.pointer.clone(), format!("concurrency bound {} {why}", b.id)))
                }
                many => {
                    let listing = crate::finding::listing(many.iter().map(|b| b.id.clone()).collect());
                    self.findings
                        .push(Finding::warning("", format!("{} concurrency bounds {why}{listing}", many.len())));
                }
            }
            let reading: Vec<&Bound> = self.bounds.iter().filter(|b| b.def.needs_body()).collect();
            let why = "read the request body, which a decision service never sees (except from Envoy's ext_authz over gRPC with with_request_body): there a body key is missing (missing: pass skips the bound, reject refuses every request) and a cost read from it is cost; serve this spec with opbound serve, or key on a header your gateway sets";
            match reading.as_slice() {
                [] => {}
                [b] => self.findings.push(Finding::warning(b.pointer.clone(), format!("bound {} {why}", b.id))),
                many => {
                    let listing = crate::finding::listing(many.iter().map(|b| b.id.clone()).collect());
                    self.findings.push(Finding::warning("", format!("{} bounds {why}{listing}", many.len())));
                }
            }
        }
    }

    /// `count-when` and `settle` wait for the response, which a decision service never sees
    /// (warned).
    fn counting(&mut self, options: &Options) {
        for b in self.bounds.iter().filter(|b| b.def.counting.after_response()) {
            let field = if b.def.counting.count_when.is_some() { "count-when" } else { "settle" };
            let at = crate::spec::pointer::push(&b.pointer, field);
            if options.decision_service {
                let (what, why) = if field == "count-when" {
                    ("counts every admitted request", "whatever its status")
                } else {
                    ("keeps the estimate (cost)", "whatever the upstream reports")
                };
                self.findings.push(Finding::warning(
                    at,
                    format!(
                        "bound {} {what} through a decision service, {why}: opbound decide never sees the response; serve this spec with opbound serve",
                        b.id
                    ),
                ));
            }
        }
    }
}
