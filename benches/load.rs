//! Loading and compiling specs: parse, read the model, validate bounds, build the router.
//!
//! `cargo bench --bench load`. The 13 MB spec is generated (1,200 operations with bounds, and the
//! bulky schemas real specs carry); the real specs in `../shared/specs` are measured too when
//! that folder is present.

use std::fmt::Write;
use std::path::Path;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use opbound::spec::Source;

/// A JSON spec of about `target` bytes with `operations` operations over a third as many paths.
fn synthetic_spec(target: usize, operations: usize) -> String {
    let paths = operations / 3;
    let mut schemas = String::new();
    let mut s = String::with_capacity(target + 1024);
    s.push_str(r#"{"openapi":"3.0.3","info":{"title":"synthetic","version":"1"},"servers":[{"url":"https://api.example.com/v1"}],"#);
    s.push_str(r#""x-rate-limit":[{"name":"perimeter","per":"address","limit":600,"window":"PT1M"}],"paths":{"#);
    for p in 0..paths {
        let template = format!("/resources{}/{{id}}/items/{{itemId}}.json", p % 97);
        let template = if p % 2 == 0 { format!("/r{p}{template}") } else { format!("/r{p}/{{id}}") };
        if p > 0 {
            s.push(',');
        }
        write!(
            s,
            r#""{template}":{{"parameters":[{{"name":"id","in":"path","required":true,"schema":{{"type":"string"}}}}],"#
        )
        .unwrap();
        for (m, method) in ["get", "post", "delete"].iter().enumerate() {
            if m > 0 {
                s.push(',');
            }
            write!(
                s,
                r##""{method}":{{"operationId":"op{p}_{method}","x-rate-limit":[{{"per":"user","limit":{},"window":"PT1M","max-keys":500}}],"requestBody":{{"content":{{"application/json":{{"schema":{{"$ref":"#/components/schemas/S{p}"}}}}}}}},"responses":{{"200":{{"description":"ok","content":{{"application/json":{{"schema":{{"$ref":"#/components/schemas/S{p}"}}}}}}}}}}}}"##,
                10 + m
            )
            .unwrap();
        }
        s.push('}');
    }
    s.push_str(r#"},"components":{"schemas":{"#);
    // Bulky schemas, as real specs have, until the document reaches its size.
    let per_schema = target.saturating_sub(s.len()) / paths.max(1);
    for p in 0..paths {
        schemas.clear();
        let mut i = 0;
        while schemas.len() < per_schema.saturating_sub(120) {
            if i > 0 {
                schemas.push(',');
            }
            write!(schemas, r#""field{i}":{{"type":"string","description":"Field {i} of resource {p}, described at length as real specs do.","maxLength":{}}}"#, 64 + i).unwrap();
            i += 1;
        }
        if p > 0 {
            s.push(',');
        }
        write!(s, r#""S{p}":{{"type":"object","properties":{{{schemas}}}}}"#).unwrap();
    }
    s.push_str("}}}");
    s
}

fn bench_load(c: &mut Criterion) {
    let mut group = c.benchmark_group("load");
    group.sample_size(10);
    let text = synthetic_spec(13 * 1024 * 1024, 1200);
    let source = Source::from_text(Path::new("synthetic.json"), text);
    let ops =
        opbound::policy::load_source(source.clone(), &opbound::Options::default()).unwrap().policy.operations.len();
    assert_eq!(ops, 1200);
    group.throughput(Throughput::Bytes(source.text.len() as u64));
    group.bench_function(BenchmarkId::new("spec", format!("synthetic 13MB {ops} operations")), |b| {
        b.iter(|| opbound::policy::load_source(source.clone(), &opbound::Options::default()).unwrap())
    });

    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/specs/real");
    for name in ["kubernetes.json", "stripe.json", "openai-3.1.yaml"] {
        let Ok(source) = Source::read(&shared.join(name)) else {
            eprintln!("{name}: not found beside the checkout; skipped");
            continue;
        };
        group.throughput(Throughput::Bytes(source.text.len() as u64));
        group.bench_function(BenchmarkId::new("spec", name), |b| {
            b.iter(|| opbound::policy::load_source(source.clone(), &opbound::Options::default()).unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, bench_load);
criterion_main!(benches);
