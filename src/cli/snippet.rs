//! `opbound decide --print-gateway GATEWAY`: the gateway's configuration for decide's own flags,
//! safe as copied. Every header opbound believes from the gateway is written by the gateway:
//! the original request's, the client's address, and the identity headers, which are cleared
//! unless the user says an authentication layer in the gateway sets them (and then the snippet
//! says where).

use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::server::decide::Gateway;

/// Where decide listens unless told: what the snippets have always asked.
const DEFAULT_ASK: &str = "127.0.0.1:9090";

/// The widest a comment line of a snippet runs, indentation included.
const WIDTH: usize = 100;

/// A part of the caller's identity, as `--identity-header FIELD=HEADER` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    User,
    Org,
    Roles,
}

impl Field {
    /// The name `--identity-header` gives it.
    pub(super) fn name(self) -> &'static str {
        match self {
            Field::User => "user",
            Field::Org => "org",
            Field::Roles => "roles",
        }
    }

    /// nginx's variable the user's authentication fills.
    fn variable(self) -> &'static str {
        match self {
            Field::User => "$opbound_user",
            Field::Org => "$opbound_org",
            Field::Roles => "$opbound_roles",
        }
    }

    /// Caddy's placeholder an authentication handler fills: the user's id, or its metadata.
    fn placeholder(self) -> &'static str {
        match self {
            Field::User => "{http.auth.user.id}",
            Field::Org => "{http.auth.user.org}",
            Field::Roles => "{http.auth.user.roles}",
        }
    }
}

/// What a snippet is made from: decide's flags.
pub(super) struct Snippet {
    pub gateway: Gateway,
    /// Where decide listens, which the gateway asks.
    pub listen: SocketAddr,
    /// The flags a reader runs decide with, for the snippet's comment.
    pub flags: String,
    /// `--path-prefix` (Envoy).
    pub path_prefix: String,
    /// The identity headers decide believes from the gateway, as written.
    pub identity: Vec<(Field, String)>,
    /// `--identity-set-by-gateway`: an authentication layer in the gateway sets them.
    pub set_by_gateway: bool,
}

/// The identity headers from `--identity-header` values already checked: each field's header
/// as written, the last one given for a field winning as it does for decide.
pub(super) fn identity(specs: &[String]) -> Vec<(Field, String)> {
    let mut out: Vec<(Field, String)> = Vec::new();
    for spec in specs {
        let Some((field, header)) = spec.split_once('=') else { continue };
        let field = match field.trim() {
            "user" => Field::User,
            "org" => Field::Org,
            "roles" => Field::Roles,
            _ => continue,
        };
        out.retain(|(f, _)| *f != field);
        out.push((field, header.trim().to_string()));
    }
    out
}

impl Snippet {
    /// The snippet for the gateway.
    pub(super) fn render(&self) -> String {
        match self.gateway {
            Gateway::Nginx => self.nginx(),
            Gateway::Caddy => self.caddy(),
            Gateway::Traefik => self.traefik(),
            Gateway::Envoy => self.envoy(),
        }
    }

    /// The address the gateway asks: decide's, with a wildcard listen asked on loopback.
    fn ask(&self) -> String {
        let ip = match self.listen.ip() {
            IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        SocketAddr::new(ip, self.listen.port()).to_string()
    }

    fn headers(&self) -> String {
        crate::finding::few(self.identity.iter().map(|(_, h)| h.clone()).collect())
    }

    fn nginx(&self) -> String {
        let ask = self.ask();
        let default = if ask == DEFAULT_ASK { ", its default" } else { "" };
        let mut out = comment(
            "    ",
            &format!("Every request asks opbound decide first (here on {ask}{default}, run with {}).", self.flags),
        );
        out.push_str(
            "    location / {
        auth_request /_opbound;
        auth_request_set $rl_limit $upstream_http_ratelimit_limit;
        auth_request_set $rl_remaining $upstream_http_ratelimit_remaining;
        auth_request_set $rl_reset $upstream_http_ratelimit_reset;
        auth_request_set $rl_retry $upstream_http_retry_after;
        auth_request_set $opbound_status $upstream_http_opbound_status;
        auth_request_set $opbound_problem $upstream_http_opbound_problem;
        add_header RateLimit-Limit $rl_limit always;
        add_header RateLimit-Remaining $rl_remaining always;
        add_header RateLimit-Reset $rl_reset always;
        error_page 403 = @opbound_refused;
        # nginx answers 500 when opbound cannot be asked (stopped, or slower than the timeouts
        # below); @opbound_unavailable says what happens then.
        error_page 500 = @opbound_unavailable;
",
        );
        out.push_str(
            "        proxy_pass http://api;
    }

    location = /_opbound {
        internal;
",
        );
        let _ = writeln!(out, "        proxy_pass http://{ask};");
        out.push_str(
            "        proxy_connect_timeout 100ms;
        proxy_read_timeout 500ms;
        proxy_pass_request_body off;
        proxy_set_header Content-Length \"\";
        # Overwrite every header opbound believes from nginx: the client may have sent them.
        proxy_set_header X-Original-Method $request_method;
        proxy_set_header X-Original-URI $request_uri;
        proxy_set_header X-Forwarded-For $remote_addr;
",
        );
        if !self.identity.is_empty() {
            let why = if self.set_by_gateway {
                let header = &self.identity[0].1;
                format!(
                    "opbound believes {} from nginx (--identity-header): each is sent as your authentication \
                     verified it, never as the client wrote it. Set {} from your authentication (a map from a \
                     variable it sets, such as auth_jwt's $jwt_claim_sub; or $http_{} only if a proxy in front \
                     of nginx overwrites {header} on every request); nginx does not start until each is defined.",
                    self.headers(),
                    crate::finding::few(self.identity.iter().map(|(f, _)| f.variable().to_string()).collect()),
                    header.to_ascii_lowercase().replace('-', "_"),
                )
            } else {
                format!(
                    "opbound believes {} from nginx (--identity-header), and nothing here sets them, so a \
                     client's copy is cleared: a client never chooses whom it is counted as. If your \
                     authentication in nginx sets them, print this with --identity-set-by-gateway.",
                    self.headers()
                )
            };
            out.push_str(&comment("        ", &why));
            for (field, header) in &self.identity {
                let value = if self.set_by_gateway { field.variable() } else { "\"\"" };
                let _ = writeln!(out, "        proxy_set_header {header} {value};");
            }
        }
        out.push_str(
            "    }

    # A refusal. nginx turns any auth status but 2xx, 401 and 403 into a 500, so opbound answers
    # 403 and sends its real status and problem body in headers: the client gets what
    # opbound serve would have sent.
    location @opbound_refused {
        default_type application/problem+json;
        add_header RateLimit-Limit $rl_limit always;
        add_header RateLimit-Remaining $rl_remaining always;
        add_header RateLimit-Reset $rl_reset always;
        add_header Retry-After $rl_retry always;
        if ($opbound_status = 400) {
            return 400 $opbound_problem;
        }
        if ($opbound_status = 503) {
            return 503 $opbound_problem;
        }
        return 429 $opbound_problem;
    }

    # opbound cannot be asked: fail closed (refuse with 503). To fail open instead (let every
    # request through, unbounded, until opbound is back), replace the two lines below with:
    #     proxy_pass http://api;
    location @opbound_unavailable {
        default_type application/problem+json;
        return 503 '{\"type\":\"tag:opbound.dev,2026:limiter-unavailable\",\"title\":\"Service Unavailable\",\"status\":503,\"detail\":\"the rate limiter cannot be asked\"}';
    }
",
        );
        out
    }

    fn caddy(&self) -> String {
        let ask = self.ask();
        let mut out = String::from(":8080 {\n\troute {\n");
        if !self.identity.is_empty() {
            out.push_str(&comment(
                "\t\t",
                &format!(
                    "opbound believes {} from Caddy (--identity-header): remove a client's copy, so a client \
                     never chooses whom it is counted as.",
                    self.headers()
                ),
            ));
            for (_, header) in &self.identity {
                let _ = writeln!(out, "\t\trequest_header -{header}");
            }
            if self.set_by_gateway {
                let placeholders: Vec<String> =
                    self.identity.iter().map(|(f, _)| f.placeholder().to_string()).collect();
                out.push_str(&comment(
                    "\t\t",
                    &format!(
                        "Your authentication goes here, before opbound is asked: it must set {} (basicauth sets \
                         the user's id; an authentication plugin sets the user's metadata).",
                        crate::finding::few(placeholders)
                    ),
                ));
                for (field, header) in &self.identity {
                    let _ = writeln!(out, "\t\trequest_header {header} {}", field.placeholder());
                }
            }
        }
        let _ = write!(
            out,
            "\t\t# Caddy sends X-Forwarded-Method and X-Forwarded-Uri; a refusal (429 with its headers
\t\t# and problem body) goes straight back to the client and ends the route here.
\t\tforward_auth {ask} {{
\t\t\turi /
\t\t\tcopy_headers RateLimit-Limit RateLimit-Remaining RateLimit-Reset
\t\t}}
\t\t# Allowed: show the decision's headers on the response too.
\t\theader RateLimit-Limit {{http.request.header.RateLimit-Limit}}
\t\theader RateLimit-Remaining {{http.request.header.RateLimit-Remaining}}
\t\theader RateLimit-Reset {{http.request.header.RateLimit-Reset}}
\t\treverse_proxy 127.0.0.1:3000
\t}}
\t# opbound cannot be asked (stopped, or unreachable): fail closed (refuse with 503). To fail
\t# open instead (let every request through, unbounded, until opbound is back), replace the
\t# two lines inside `handle @opbound_unavailable` with:
\t#     reverse_proxy 127.0.0.1:3000
\thandle_errors {{
\t\t@opbound_unavailable expression `{{http.reverse_proxy.upstream.hostport}} == \"{ask}\"`
\t\thandle @opbound_unavailable {{
\t\t\theader Content-Type application/problem+json
\t\t\trespond `{{\"type\":\"tag:opbound.dev,2026:limiter-unavailable\",\"title\":\"Service Unavailable\",\"status\":503,\"detail\":\"the rate limiter cannot be asked\"}}` 503
\t\t}}
\t}}
}}
"
        );
        out
    }

    fn traefik(&self) -> String {
        let ask = self.ask();
        let mut out = String::from("http:\n  middlewares:\n");
        let mut chain = vec!["opbound"];
        if !self.identity.is_empty() {
            out.push_str(&comment(
                "    ",
                &format!(
                    "opbound believes {} from Traefik (--identity-header): an empty value removes a client's \
                     copy, so a client never chooses whom it is counted as.",
                    self.headers()
                ),
            ));
            out.push_str("    opbound-identity:\n      headers:\n        customRequestHeaders:\n");
            for (_, header) in &self.identity {
                let _ = writeln!(out, "          {header}: \"\"");
            }
            chain = if self.set_by_gateway {
                vec!["opbound-identity", "your-authentication", "opbound"]
            } else {
                vec!["opbound-identity", "opbound"]
            };
        }
        let _ = write!(
            out,
            "    opbound:
      forwardAuth:
        address: http://{ask}/
        trustForwardHeader: false
        authResponseHeaders: [RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset]
  routers:
    api:
      rule: PathPrefix(`/`)
"
        );
        if self.set_by_gateway && !self.identity.is_empty() {
            out.push_str(&comment(
                "      ",
                &format!(
                    "your-authentication: your own middleware, between the two, which must set {} (a \
                     forwardAuth to your authentication service with authResponseHeaders: [{}] does).",
                    self.headers(),
                    self.identity.iter().map(|(_, h)| h.as_str()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        let _ = write!(
            out,
            "      middlewares: [{}]
      service: api
  services:
    api:
      loadBalancer:
        servers: [{{url: http://127.0.0.1:3000}}]
",
            chain.join(", ")
        );
        out
    }

    fn envoy(&self) -> String {
        let ask = self.ask();
        let mut out = String::from("http_filters:\n");
        if !self.identity.is_empty() {
            out.push_str(&comment(
                "  ",
                &format!(
                    "opbound believes {} from Envoy (--identity-header): remove a client's copy first, so a \
                     client never chooses whom it is counted as.",
                    self.headers()
                ),
            ));
            out.push_str(
                "  - name: envoy.filters.http.header_mutation
    typed_config:
      \"@type\": type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation
      mutations:
        request_mutations:
",
            );
            for (_, header) in &self.identity {
                let _ = writeln!(out, "          - remove: {}", header.to_ascii_lowercase());
            }
            if self.set_by_gateway {
                out.push_str(&comment(
                    "  ",
                    &format!(
                        "Your authentication filter goes here, between the two, and must set {} (jwt_authn \
                         with claim_to_headers does).",
                        self.headers()
                    ),
                ));
            }
        }
        let prefix = match self.path_prefix.as_str() {
            "" => String::new(),
            p => format!("        path_prefix: {p}\n"),
        };
        let mut allowed =
            String::from("{exact: authorization}, {exact: cookie}, {exact: x-api-key}, {exact: x-forwarded-for}");
        for (_, header) in &self.identity {
            let _ = write!(allowed, ", {{exact: {}}}", header.to_ascii_lowercase());
        }
        let _ = write!(
            out,
            "  - name: envoy.filters.http.ext_authz
    typed_config:
      \"@type\": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
      failure_mode_allow: true
      http_service:
        server_uri: {{uri: {ask}, cluster: opbound, timeout: 0.25s}}
{prefix}        authorization_request:
          allowed_headers:
            patterns: [{allowed}]
        authorization_response:
          allowed_client_headers:
            patterns: [{{exact: ratelimit-limit}}, {{exact: ratelimit-remaining}}, {{exact: ratelimit-reset}}, {{exact: retry-after}}, {{exact: content-type}}]
          allowed_client_headers_on_success:
            patterns: [{{exact: ratelimit-limit}}, {{exact: ratelimit-remaining}}, {{exact: ratelimit-reset}}]
  - name: envoy.filters.http.router
"
        );
        out
    }
}

/// `text` as comment lines (`# ...`) after `indent`, wrapped at [`WIDTH`] columns (a tab counts
/// four).
fn comment(indent: &str, text: &str) -> String {
    let start = indent.replace('\t', "    ").len() + 2;
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && start + line.len() + 1 + word.len() > WIDTH {
            let _ = writeln!(out, "{indent}# {line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}# {line}");
    }
    out
}
