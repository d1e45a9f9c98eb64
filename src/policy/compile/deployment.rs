//! Deployment warnings: what the way a policy is run (in-memory counts, a decision service)
//! changes about what its bounds can promise.

use super::Compiler;
use crate::finding::Finding;
use crate::policy::{Algorithm, Bound, Missing, Options};

impl Compiler {
    pub(super) fn deployment(&mut self, options: &Options) {
        if !self.bounds.is_empty() && !options.shared_store && !options.per_instance_ok {
            self.findings.push(Finding::warning(
                "",
                "counts are per instance: with the in-memory store each opbound instance counts on its own, so N instances admit up to N times each limit; use --store redis://... to share them, or check --per-instance-ok when that is intended",
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
            self.refused_without_a_body(options);
            // A bound refused above is not warned about again.
            let refuses = |b: &Bound| !options.decision_bodies && refuses_without_a_body(b);
            let reading: Vec<&Bound> = self.bounds.iter().filter(|b| b.def.needs_body() && !refuses(b)).collect();
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

    /// Issue 47, item 5: a bound keyed on the body with `missing: reject` refuses every request a
    /// gateway asks about over HTTP (it sends no body), so such a spec cannot be served that way:
    /// an error at each such bound, saying what to do instead.
    fn refused_without_a_body(&mut self, options: &Options) {
        if options.decision_bodies {
            return;
        }
        for b in self.bounds.iter().filter(|b| refuses_without_a_body(b)) {
            self.findings.push(Finding::error(
                crate::spec::pointer::push(&b.pointer, "per"),
                format!(
                    "bound {} is keyed on the request body (per {}) with missing: reject, and a gateway asking opbound \
                     decide sends no body, so every request to it would be refused with 400; serve this spec with \
                     opbound serve (which reads the body), or key the bound on something the gateway forwards (a \
                     header, a cookie, the address, the user); Envoy's gRPC ext_authz with with_request_body sends \
                     the body: for it run decide --grpc --no-http (check --decide --no-http)",
                    b.id, b.def.per
                ),
            ));
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
        for b in &self.bounds {
            let Some(settle) = &b.def.counting.settle else { continue };
            if matches!(settle, crate::policy::Settle::Body(_)) && b.def.cost_from.is_none() && b.def.cost.get() == 1 {
                self.findings.push(Finding::warning(
                    crate::spec::pointer::push(&b.pointer, "settle"),
                    format!(
                        "bound {} is settled from the response ({settle}) but reserves 1 at admission: until a \
                         response reports its usage, a burst of concurrent requests is admitted as if each cost 1; \
                         reserve what a request may use, e.g. cost-from: json:/max_tokens with max-cost, or a cost",
                        b.id
                    ),
                ));
            }
            // Without it, a success that reports nothing pays the estimate, which the client sets.
            if b.def.counting.max_cost.is_none() {
                self.findings.push(Finding::warning(
                    crate::spec::pointer::push(&b.pointer, "settle"),
                    format!(
                        "bound {} is settled from the response ({settle}) but has no max-cost: a success that \
                         never reports its usage (a stream without its usage chunk, a client that hangs up before \
                         it, a body that cannot be read) pays only its estimate of {}, whatever it used; add \
                         max-cost, what such a response is charged (the most one request may use, e.g. max-cost: \
                         128000)",
                        b.id, b.def.cost
                    ),
                ));
            }
        }
    }
}

/// Whether a bound refuses every request that comes without a body: keyed on the body, with
/// `missing: reject`.
fn refuses_without_a_body(b: &Bound) -> bool {
    b.def.per.needs_body() && b.def.missing == Missing::Reject
}
