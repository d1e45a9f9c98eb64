use super::*;

fn headers(fields: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in fields {
        map.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
    }
    map
}

fn names(map: &HeaderMap) -> Vec<&str> {
    let mut names: Vec<&str> = map.keys().map(HeaderName::as_str).collect();
    names.sort_unstable();
    names
}

#[test]
fn hop_by_hop_fields_and_those_connection_names_are_removed() {
    let fields = [
        ("connection", "close, X-Internal"),
        ("connection", " upgrade ,, Keep-Alive"),
        ("x-internal", "a"),
        ("keep-alive", "timeout=5"),
        ("upgrade", "websocket"),
        ("te", "trailers"),
        ("transfer-encoding", "chunked"),
        ("proxy-authorization", "Basic x"),
        ("trailer", "X-Sum"),
        ("x-kept", "b"),
    ];
    let mut plain = headers(&fields);
    strip_hop_by_hop(&mut plain, None);
    assert_eq!(names(&plain), ["trailer", "x-kept"]);

    let mut upgrade = headers(&fields);
    strip_hop_by_hop(&mut upgrade, Some("upgrade"));
    assert_eq!(names(&upgrade), ["connection", "trailer", "upgrade", "x-kept"]);
    assert_eq!(upgrade[header::CONNECTION], "upgrade");
    assert_eq!(upgrade[header::UPGRADE], "websocket");
}

#[test]
fn only_allowed_protocols_are_switched_to_and_h2c_never() {
    let websocket = Upgrades::default();
    let asked = |upgrades: &Upgrades, fields: &[(&str, &str)]| {
        upgrades.asked(&headers(fields)).map(|v| v.to_str().unwrap().to_string())
    };
    fn upgrade(protocols: &str) -> [(&str, &str); 2] {
        [("connection", "keep-alive, Upgrade"), ("upgrade", protocols)]
    }
    assert_eq!(asked(&websocket, &upgrade("websocket")), Some("websocket".to_string()));
    assert_eq!(asked(&websocket, &upgrade("WebSocket/13")), Some("WebSocket/13".to_string()));
    assert_eq!(asked(&websocket, &upgrade("h2c")), None, "an h2c upgrade is an ordinary request");
    assert_eq!(asked(&websocket, &upgrade("h2c, websocket")), Some("websocket".to_string()));
    assert_eq!(asked(&websocket, &upgrade("TLS/1.2, IRC")), None);
    assert_eq!(asked(&websocket, &[("upgrade", "websocket")]), None, "no Connection: upgrade, no switch");
    let none = Upgrades::new(Vec::new()).unwrap();
    assert_eq!(asked(&none, &upgrade("websocket")), None);
    let irc = Upgrades::new(vec!["irc".into(), "websocket".into()]).unwrap();
    assert_eq!(asked(&irc, &upgrade("IRC/6.9, h2c, websocket")), Some("IRC/6.9, websocket".to_string()));
    assert_eq!(Upgrades::new(vec!["H2C".into()]).unwrap_err(), UpgradeError::H2c);
    assert!(UpgradeError::H2c.to_string().contains("h2c cannot be allowed"));
    assert!(Upgrades::new(vec!["web socket".into()]).is_err());
}

#[test]
fn an_h2c_upgrade_loses_its_settings_whatever_connection_names() {
    let forwarding = Forwarding {
        peer: "192.0.2.1:4000".parse().unwrap(),
        peer_trusted: false,
        identity: &IdentityHeaders::default(),
        host: None,
    };
    let mut map =
        headers(&[("connection", "Upgrade"), ("upgrade", "h2c"), ("http2-settings", "AAMAAABkAAQCAAAAAAIAAAAA")]);
    let switch_to = Upgrades::default().asked(&map);
    forward_map(&mut map, &forwarding, switch_to);
    assert_eq!(names(&map), ["x-forwarded-for", "x-forwarded-proto"]);
    let mut head = Vec::new();
    let list = list(&[("connection", b"Upgrade"), ("upgrade", b"h2c"), ("http2-settings", b"AAMAAABk")]);
    write_forwarded(&list, &forwarding, &mut head);
    let written: Vec<String> =
        sent(&[b"GET / HTTP/1.1\r\n".as_slice(), &head, b"\r\n"].concat()).into_iter().map(|(name, _)| name).collect();
    assert_eq!(written, ["x-forwarded-for", "x-forwarded-proto"]);
}

/// A request's fields as opbound's reader lists them: each value a span of one head.
fn list(fields: &[(&str, &[u8])]) -> Fields {
    let mut head = Vec::new();
    let mut spans = Vec::new();
    for &(name, value) in fields {
        spans.push((name, head.len(), value.len()));
        head.extend_from_slice(value);
    }
    let mut list = Fields::new(bytes::Bytes::from(head), fields.len());
    for (name, start, len) in spans {
        list.push(HeaderName::from_bytes(name.as_bytes()).unwrap(), start, len);
    }
    list
}

/// The fields of a written request head, grouped by name as a map keeps them: in the order
/// their names first came, each name's values in their order.
fn sent(head: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut fields);
    assert!(request.parse(head).unwrap().is_complete(), "{}", String::from_utf8_lossy(head));
    let mut sent: Vec<(String, Vec<u8>)> =
        request.headers.iter().map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec())).collect();
    sent.sort_by(|a, b| a.0.cmp(&b.0));
    sent
}

/// What the upstream is sent of `fields`, by way of a map and by way of a list.
fn both_ways(fields: &[(&str, &[u8])], forwarding: &Forwarding<'_>) -> (Vec<u8>, Vec<u8>) {
    let parts = || http::Request::get("/x").body(()).unwrap().into_parts().0;
    let mut map = HeaderMap::new();
    for &(name, value) in fields {
        map.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_bytes(value).unwrap());
    }
    forward_map(&mut map, forwarding, None);
    let mut by_map = Vec::new();
    let mut with_map = parts();
    with_map.headers = map;
    let had_length = with_map.headers.contains_key(header::CONTENT_LENGTH);
    crate::server::upstream::h1::write_request(&with_map, b"", had_length, &mut by_map);

    let mut by_list = Vec::new();
    crate::server::upstream::h1::write_request_line(&parts(), &mut by_list);
    let had_length = write_forwarded(&list(fields), forwarding, &mut by_list);
    crate::server::upstream::h1::end_request(b"", had_length, &mut by_list);
    (by_map, by_list)
}

#[test]
fn a_list_is_forwarded_as_its_map_would_be() {
    const FIELDS: &[(&str, &[u8])] = &[
        ("host", b"api.example"),
        ("host", b"other"),
        ("x-api-key", b"k1"),
        ("X-Api-Key", b"k2"),
        ("connection", b"close"),
        ("connection", b"x-internal, X-API-KEY"),
        ("connection", b"keep-alive, host"),
        ("connection", b"x-forwarded-for"),
        ("connection", b"X-Forwarded-Proto, \xff"),
        ("connection", b"x-forwarded-host"),
        ("x-internal", b"secret"),
        ("keep-alive", b"timeout=5"),
        ("te", b"trailers"),
        ("proxy-authorization", b"Basic x"),
        ("trailer", b"X-Sum"),
        ("upgrade", b"websocket"),
        ("content-length", b"0"),
        ("x-forwarded-for", b"203.0.113.1"),
        ("x-forwarded-for", b"198.51.100.2, 10.0.0.1"),
        ("x-forwarded-for", b"caf\xc3\xa9"),
        ("x-forwarded-proto", b"https"),
        ("x-forwarded-host", b"front.example"),
        ("x-user", b"ann"),
        ("x-roles", b"admin"),
        ("accept", b""),
    ];
    let identity = IdentityHeaders {
        user: Some(HeaderName::from_static("x-user")),
        org: None,
        roles: Some(HeaderName::from_static("x-roles")),
    };
    let upstream_host = HeaderValue::from_static("upstream:8080");
    // Requests of up to eight fields drawn from the ones above, the same draw every run.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let mut differed = 0;
    for case in 0..4000 {
        let fields: Vec<_> = (0..next(9)).map(|_| FIELDS[next(FIELDS.len())]).collect();
        let peer = if case % 3 == 0 { "[2001:db8::7]:4000" } else { "192.0.2.7:4000" }.parse().unwrap();
        let forwarding = Forwarding {
            peer,
            peer_trusted: case % 2 == 0,
            identity: &identity,
            host: (case % 5 != 0).then_some(&upstream_host),
        };
        let (by_map, by_list) = both_ways(&fields, &forwarding);
        assert_eq!(
            sent(&by_list),
            sent(&by_map),
            "{fields:?}, trusted: {}\nlist:\n{}\nmap:\n{}",
            forwarding.peer_trusted,
            String::from_utf8_lossy(&by_list),
            String::from_utf8_lossy(&by_map)
        );
        differed += usize::from(by_list != by_map);
    }
    // The ways differ only in where the fields they set go, and they do set some.
    assert!(differed > 0);
}

#[test]
fn a_listed_request_s_forwarding_fields_are_set_as_the_peer_is_trusted() {
    let identity = IdentityHeaders { user: Some(HeaderName::from_static("x-user")), org: None, roles: None };
    let fields: &[(&str, &[u8])] = &[
        ("host", b"api.example"),
        ("x-forwarded-for", b"203.0.113.1"),
        ("x-forwarded-proto", b"https"),
        ("x-user", b"ann"),
        ("connection", b"keep-alive"),
        ("keep-alive", b"timeout=5"),
    ];
    let write = |peer_trusted| {
        let forwarding =
            Forwarding { peer: "192.0.2.7:4000".parse().unwrap(), peer_trusted, identity: &identity, host: None };
        let mut out = Vec::new();
        write_forwarded(&list(fields), &forwarding, &mut out);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(
        write(true),
        "host: api.example\r\nx-forwarded-proto: https\r\nx-user: ann\r\n\
             x-forwarded-for: 203.0.113.1, 192.0.2.7\r\nx-forwarded-host: api.example\r\n"
    );
    assert_eq!(
        write(false),
        "host: api.example\r\nx-forwarded-for: 203.0.113.1, 192.0.2.7\r\n\
             x-forwarded-proto: http\r\nx-forwarded-host: api.example\r\n"
    );
}

#[test]
fn addresses_are_written_as_they_display() {
    for ip in ["0.0.0.0", "192.0.2.7", "10.200.3.45", "255.255.255.255", "2001:db8::1", "::1"] {
        let ip: std::net::IpAddr = ip.parse().unwrap();
        let mut out = [0u8; 64];
        let n = write_address(ip, &mut out);
        assert_eq!(std::str::from_utf8(&out[..n]).unwrap(), ip.to_string());
    }
}

#[test]
fn the_peer_is_appended_to_x_forwarded_for() {
    let peer: SocketAddr = "[::ffff:192.0.2.7]:4000".parse().unwrap();
    let mut fresh = HeaderMap::new();
    forwarded_headers(&mut fresh, peer, None, false);
    assert_eq!(fresh[&X_FORWARDED_FOR], "192.0.2.7");

    let mut chained = headers(&[("x-forwarded-for", "203.0.113.1"), ("x-forwarded-for", "198.51.100.2")]);
    let v6: SocketAddr = "[2001:db8::1]:4000".parse().unwrap();
    forwarded_headers(&mut chained, v6, None, true);
    assert_eq!(chained[&X_FORWARDED_FOR], "203.0.113.1, 198.51.100.2, 2001:db8::1");
}
