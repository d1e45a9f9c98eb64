//! Issue 50: one dead or hung Redis node slows only its own keys, briefly, and quietly. Real
//! `opbound serve` processes on a real Redis Cluster of three masters and three replicas, on a
//! single `redis-server` killed and restarted, and on a primary watched by three real Sentinels,
//! all under steady load, all on free loopback ports.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{Killed, Opbound, Redis, TempSpec, Upstream, free_port, get, get_with, require};

/// `load` carries the steady load (every caller new, so keys spread over every slot); the others
/// are one bound per `on-store-error`, each counted per `X-Key`.
const SPEC: &str = r#"
openapi: 3.0.3
info: {title: store faults, version: '1'}
paths:
  /load:
    get:
      operationId: load
      x-rate-limit: {per: 'header:X-Key', limit: 1000000, window: PT1H, on-store-error: local}
  /exact:
    get:
      operationId: exact
      x-rate-limit: {per: 'header:X-Key', limit: 40, window: PT1H, on-store-error: closed}
  /open:
    get:
      operationId: open
      x-rate-limit: {per: 'header:X-Key', limit: 2, window: PT1H, on-store-error: open}
  /local:
    get:
      operationId: local
      x-rate-limit: {per: 'header:X-Key', limit: 2, window: PT1H, on-store-error: local}
"#;

/// Long, so a healthy node's answer is never taken for a fault on a loaded machine, and a
/// request that waited for a faulty node shows: requests for a node known out of reach must
/// answer far sooner.
const TIMEOUT: &str = "2s";
const FAST: Duration = Duration::from_millis(800);

/// Instances on one store, once each counts in it.
async fn instances(n: usize, upstream: &str, spec: &TempSpec, store: &str) -> Vec<Opbound> {
    let obs: Vec<Opbound> = (0..n)
        .map(|_| {
            Opbound::start(&[
                "serve",
                "--spec",
                spec.arg(),
                "--upstream",
                upstream,
                "--store",
                store,
                "--store-timeout",
                TIMEOUT,
                "--admin",
                "127.0.0.1:0",
            ])
        })
        .collect();
    for ob in &obs {
        wait_metric(ob, "opbound_store_up 1", Duration::from_secs(20)).await;
    }
    obs
}

async fn wait_metric(ob: &Opbound, line: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let m = metrics(ob).await;
        if m.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "no {line:?} within {within:?}:\n{}", store_lines(&m));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metrics(ob: &Opbound) -> String {
    get(format!("http://{}/metrics", ob.admin().unwrap())).await.body
}

fn store_lines(metrics: &str) -> String {
    metrics.lines().filter(|l| l.contains("store") && !l.starts_with('#')).collect::<Vec<_>>().join("\n")
}

/// Decisions in which some bound followed `on-store-error: policy`, on one instance.
async fn followed(ob: &Opbound, policy: &str) -> u64 {
    let m = metrics(ob).await;
    let prefix = format!("opbound_store_fallbacks_by_policy_total{{on_store_error=\"{policy}\"}} ");
    m.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Steady load: `tasks` loops, each sending requests with a fresh `X-Key` to the instances in
/// turn, until stopped. Counts answers by class; a request that fails outright is a failure.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    other: Arc<AtomicUsize>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(urls: Vec<String>, tasks: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let (ok, other) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let handles = (0..tasks)
            .map(|t| {
                let (stop, ok, other, urls) = (stop.clone(), ok.clone(), other.clone(), urls.clone());
                tokio::spawn(async move {
                    let mut i = 0usize;
                    while !stop.load(Ordering::Relaxed) {
                        let url = &urls[(t + i) % urls.len()];
                        let r = get_with(url, &[("x-key", &format!("load-{t}-{i}"))]).await;
                        if r.status == 200 { &ok } else { &other }.fetch_add(1, Ordering::Relaxed);
                        i += 1;
                    }
                })
            })
            .collect();
        Load { stop, ok, other, handles }
    }

    fn answered(&self) -> usize {
        self.ok.load(Ordering::Relaxed)
    }

    async fn stop(self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            h.await.expect("a load task panicked: a request failed outright");
        }
        (self.ok.load(Ordering::Relaxed), self.other.load(Ordering::Relaxed))
    }
}

/// Sends `total` requests for one caller from 16 tasks, spread round-robin across the instances.
async fn burst(obs: &[Opbound], path: &str, key: &str, total: usize) -> Vec<u16> {
    let urls: Vec<String> = obs.iter().map(|o| o.url(path)).collect();
    common::spread(&urls, &[("x-key", key)], total).await.iter().map(|g| g.status).collect()
}

/// What each instance logged about the store, for failure messages.
fn store_logs(obs: &[Opbound]) -> String {
    obs.iter()
        .enumerate()
        .map(|(i, ob)| format!("instance {i}:\n{}", ob.logged("store").join("\n")))
        .collect::<Vec<_>>()
        .join("\n")
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

/// One request, and how long it took.
async fn timed(ob: &Opbound, path: &str, key: &str) -> (u16, Duration) {
    let started = Instant::now();
    let r = get_with(&ob.url(path), &[("x-key", key)]).await;
    (r.status, started.elapsed())
}

/// Lines each instance logged since `marks` (its line count then).
fn logged_since(obs: &[Opbound], marks: &[usize]) -> Vec<Vec<String>> {
    obs.iter().zip(marks).map(|(ob, &m)| ob.stderr.lock().unwrap()[m..].to_vec()).collect()
}

fn marks(obs: &[Opbound]) -> Vec<usize> {
    obs.iter().map(|ob| ob.stderr.lock().unwrap().len()).collect()
}

fn assert_quiet(obs: &[Opbound], marks: &[usize], what: &str) {
    for (i, lines) in logged_since(obs, marks).iter().enumerate() {
        assert!(lines.len() <= 20, "instance {i} logged {} lines during {what}:\n{}", lines.len(), lines.join("\n"));
    }
}

fn assert_alive(obs: &mut [Opbound]) {
    for (i, ob) in obs.iter_mut().enumerate() {
        assert!(ob.child.try_wait().unwrap().is_none(), "instance {i} died");
    }
}

/// A free port whose cluster bus port (the port + 10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let p = free_port();
        if p < 55535 && std::net::TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
            return p;
        }
    }
}

/// A Redis Cluster of three masters, each with a replica, started for the test.
struct Cluster {
    nodes: Vec<Redis>,
}

impl Cluster {
    async fn start() -> Cluster {
        // A replica that never synchronised is not eligible to take over: sync at once. Masters
        // whose slots are all served keep answering while another's are not (by default the
        // whole cluster answers CLUSTERDOWN from the moment a master is marked failed until its
        // replica is promoted, about a second, which the docs say).
        let args = [
            "--cluster-require-full-coverage",
            "no",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
            "--repl-diskless-sync-delay",
            "0",
        ];
        let nodes: Vec<Redis> = (0..6).map(|_| Redis::on_port("faults", cluster_port(), &args)).collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new(require("redis-cli"))
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap();
        assert!(out.status.success(), "cluster create: {}", String::from_utf8_lossy(&out.stdout));
        let cluster = Cluster { nodes };
        cluster.wait_ok(&[], Duration::from_secs(30)).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        while cluster.nodes.iter().filter(|n| n.cli(&["INFO", "replication"]).contains("master_link_status:up")).count()
            < 3
        {
            assert!(Instant::now() < deadline, "the replicas did not synchronise");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cluster
    }

    fn url(&self) -> String {
        let addrs: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", addrs.join(","))
    }

    /// Ports of the masters that serve slots, from the view of node `via`.
    fn masters(&self, via: usize) -> Vec<u16> {
        let view = self.nodes[via].cli(&["CLUSTER", "NODES"]);
        view.lines()
            .filter(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                f.len() > 8 && f[2].contains("master") && !f[2].contains("fail")
            })
            .filter_map(|l| l.split(' ').nth(1)?.split(['@', ':']).nth(1)?.parse().ok())
            .collect()
    }

    fn index(&self, port: u16) -> usize {
        self.nodes.iter().position(|n| n.port == port).unwrap()
    }

    /// Until every node but `except` says the cluster is ok with three masters serving slots.
    async fn wait_ok(&self, except: &[usize], within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let ok = (0..self.nodes.len()).filter(|i| !except.contains(i)).all(|i| {
                self.nodes[i].cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
                    && self.masters(i).iter().all(|p| !except.contains(&self.index(*p)))
                    && self.masters(i).len() == 3
            });
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster was not ok within {within:?}:\n{}",
                (0..self.nodes.len())
                    .filter(|i| !except.contains(i))
                    .map(|i| format!(
                        "{}\n{}",
                        self.nodes[i].cli(&["CLUSTER", "INFO"]),
                        self.nodes[i].cli(&["CLUSTER", "NODES"])
                    ))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Finds, among fresh callers of `path` asked of instance 0, one whose key the faulty node holds
/// (its request followed on-store-error: `policy`) and one a healthy master holds (it did not).
/// Every answer for a key of the faulty node must come fast once its circuit is open.
async fn split(ob: &Opbound, path: &str, policy: &str, tag: &str) -> (String, String) {
    let (mut faulty, mut healthy) = (None, None);
    for i in 0..64 {
        let key = format!("{tag}-{i}");
        let before = followed(ob, policy).await;
        let (status, took) = timed(ob, path, &key).await;
        let after = followed(ob, policy).await;
        if after > before {
            assert!(took < FAST || faulty.is_none(), "{path} {key}: {took:?} for a node known out of reach");
            faulty.get_or_insert(key);
        } else {
            assert_eq!(status, 200, "{path} {key} on a healthy master");
            healthy.get_or_insert(key);
        }
        if let (Some(f), Some(h)) = (&faulty, &healthy) {
            return (f.clone(), h.clone());
        }
    }
    panic!("64 callers of {path} found no key on both sides: faulty {faulty:?}, healthy {healthy:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_or_hung_master_slows_only_its_own_keys_briefly_and_quietly() {
    let cluster = Cluster::start().await;
    let up = Upstream::start().await;
    let spec = TempSpec::new("faults", SPEC);
    let mut obs = instances(3, &up.url(), &spec, &cluster.url()).await;
    // Instances 1 and 2 carry the load; instance 0's own fallback counts then say which
    // requests followed on-store-error.
    let load = Load::start(obs[1..].iter().map(|o| o.url("/load")).collect(), 8);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(load.answered() > 0, "the load runs");

    // A master is killed. Its replica takes over after the cluster's node timeout (2 s).
    let masters = cluster.masters(0);
    let victim = cluster.index(masters[0]);
    let mark = marks(&obs);
    let killed_at = Instant::now();
    cluster.nodes[victim].signal("KILL");

    // Its keys follow each bound's on-store-error, at once.
    let (closed, healthy) = split(&obs[0], "/exact", "closed", "exact").await;
    let (status, took) = timed(&obs[0], "/exact", &closed).await;
    assert_eq!(status, 503, "on-store-error: closed refuses");
    assert!(took < FAST, "a closed answer took {took:?}");
    let (open, _) = split(&obs[0], "/open", "open", "open").await;
    for _ in 0..4 {
        let (status, took) = timed(&obs[0], "/open", &open).await;
        assert_eq!(status, 200, "on-store-error: open admits past the limit of 2, uncounted");
        assert!(took < FAST);
    }
    let (local, _) = split(&obs[0], "/local", "local", "local").await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(timed(&obs[0], "/local", &local).await.0);
    }
    assert_eq!(statuses, [200, 429, 429], "on-store-error: local counts on this instance (one used finding it)");

    // A key on a healthy master stays exact across the three instances during the outage.
    let statuses = burst(&obs, "/exact", &healthy, 100).await;
    assert_eq!((count(&statuses, 200), count(&statuses, 429)), (39, 61), "exact on a healthy master: {statuses:?}");

    // After the failover the dead master's keys are counted again, exactly, within 2 s, on every
    // instance (each reads the new slot map on its own).
    cluster.wait_ok(&[victim], Duration::from_secs(20)).await;
    let failed_over = Instant::now();
    let mut admitted = 0;
    for ob in &obs {
        loop {
            let (status, _) = timed(ob, "/exact", &closed).await;
            if status == 200 {
                admitted += 1;
                break;
            }
            assert!(
                failed_over.elapsed() < Duration::from_secs(2),
                "still {status} {:?} after the failover:\n{}",
                failed_over.elapsed(),
                store_logs(&obs)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let statuses = burst(&obs, "/exact", &closed, 100).await;
    assert_eq!(
        (count(&statuses, 200), count(&statuses, 429)),
        (40 - admitted, 60 + admitted),
        "exact again after the failover: {statuses:?}\n{}",
        store_logs(&obs)
    );

    // Ten seconds of that outage, and a handful of lines.
    tokio::time::sleep((killed_at + Duration::from_secs(10)).saturating_duration_since(Instant::now())).await;
    assert_quiet(&obs, &mark, "ten seconds after a master was killed");
    let failed = obs[0].logged("store unreachable");
    assert!(failed.iter().any(|l| l.contains(&cluster.nodes[victim].port.to_string())), "{failed:#?}");

    // A master hangs: it accepts and never answers. The first calls wait the store timeout; then
    // its circuit opens and its keys are answered at once.
    let survivor = usize::from(victim == 0);
    let masters = cluster.masters(survivor);
    let hung = cluster.index(masters[0]);
    let mark = marks(&obs);
    let hung_at = Instant::now();
    cluster.nodes[hung].signal("STOP");
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let url = obs[0].url("/exact");
            tokio::spawn(async move { (i, get_with(&url, &[("x-key", &format!("hang-{i}"))]).await.status) })
        })
        .collect();
    let mut on_hung = Vec::new();
    let mut elsewhere = Vec::new();
    for t in tasks {
        let (i, status) = t.await.unwrap();
        if status == 503 { &mut on_hung } else { &mut elsewhere }.push(format!("hang-{i}"));
    }
    assert!(!on_hung.is_empty() && !elsewhere.is_empty(), "keys on both sides: {on_hung:?} {elsewhere:?}");
    for key in &on_hung {
        let (status, took) = timed(&obs[0], "/exact", key).await;
        // Either the circuit is open (503 at once) or the cluster already failed over (counted).
        assert!(status == 503 || status == 200, "{status}");
        assert!(took < FAST, "{key}: {took:?} with the hung node's circuit open");
    }
    let statuses = burst(&obs, "/exact", &elsewhere[0], 100).await;
    assert_eq!(
        (count(&statuses, 200), count(&statuses, 429)),
        (39, 61),
        "exact on a healthy master while one hangs: {statuses:?}"
    );

    // It answers again: counting resumes on its keys (on it, or on the replica that took over).
    cluster.nodes[hung].signal("CONT");
    let resumed = Instant::now();
    loop {
        if timed(&obs[0], "/exact", &on_hung[0]).await.0 == 200 {
            break;
        }
        assert!(resumed.elapsed() < Duration::from_secs(5), "not counted {:?} after SIGCONT", resumed.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep((hung_at + Duration::from_secs(10)).saturating_duration_since(Instant::now())).await;
    assert_quiet(&obs, &mark, "ten seconds of a hung master");

    let (ok, other) = load.stop().await;
    assert_eq!(other, 0, "every load request was admitted ({ok} were): on-store-error is local");
    assert_alive(&mut obs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_single_redis_killed_and_restarted_under_load_logs_a_handful_of_lines() {
    let redis = Redis::start("single-fault", &[]);
    let up = Upstream::start().await;
    let spec = TempSpec::new("single-fault", SPEC);
    let mut obs = instances(2, &up.url(), &spec, &redis.url()).await;
    let load = Load::start(obs.iter().map(|o| o.url("/load")).collect(), 8);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mark = marks(&obs);
    let stopped_at = Instant::now();
    redis.signal("KILL");
    let port = redis.stop();
    // Every key is on the one server: each request follows on-store-error, and at once.
    for i in 0..5 {
        let (status, took) = timed(&obs[0], "/exact", &format!("down-{i}")).await;
        assert_eq!(status, 503);
        assert!(took < FAST, "{took:?} with the store known down");
    }
    let node_down = format!("opbound_store_node_up{{node=\"127.0.0.1:{port}\"}} 0");
    wait_metric(&obs[0], &node_down, Duration::from_secs(2)).await;
    tokio::time::sleep((stopped_at + Duration::from_secs(10)).saturating_duration_since(Instant::now())).await;
    let _redis = Redis::on_port("single-fault-again", port, &[]);
    for ob in &obs {
        wait_metric(ob, "opbound_store_up 1", Duration::from_secs(5)).await;
    }
    let statuses = burst(&obs, "/exact", "after", 60).await;
    assert_eq!((count(&statuses, 200), count(&statuses, 429)), (40, 20), "counted in the store again");
    assert_quiet(&obs, &mark, "ten seconds without the store, and its return");
    for ob in &obs {
        let back = ob.logged("store reachable again");
        assert_eq!(back.len(), 1, "{back:#?}");
        assert!(back[0].contains("fallbacks"), "{}", back[0]);
    }
    let (_, other) = load.stop().await;
    assert_eq!(other, 0);
    assert_alive(&mut obs);
}

/// A primary, a replica and three Sentinels watching them, started for the test.
struct Sentinels {
    primary: Redis,
    replica: Redis,
    sentinels: Vec<(Killed, u16, TempSpec)>,
}

impl Sentinels {
    async fn start() -> Sentinels {
        let primary = Redis::start("sentinel-primary", &[]);
        let replica = Redis::start("sentinel-replica", &["--replicaof", "127.0.0.1", &primary.port.to_string()]);
        let sentinels = (0..3)
            .map(|i| {
                let port = free_port();
                let conf = format!(
                    "port {port}\nbind 127.0.0.1\nsentinel monitor opb 127.0.0.1 {} 2\nsentinel down-after-milliseconds opb 1000\nsentinel failover-timeout opb 10000\n",
                    primary.port
                );
                let dir = TempSpec::new(&format!("sentinel-{i}-{port}"), &conf);
                let child = Command::new(require("redis-sentinel"))
                    .arg(dir.arg())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-sentinel starts");
                (Killed(child), port, dir)
            })
            .collect();
        let s = Sentinels { primary, replica, sentinels };
        // Until every Sentinel knows the replica and the others.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !(0..3).all(|i| {
            let replicas = s.cli(i, &["SENTINEL", "REPLICAS", "opb"]);
            let quorum = s.cli(i, &["SENTINEL", "CKQUORUM", "opb"]);
            replicas.contains(&s.replica.port.to_string()) && quorum.contains("3 usable")
        }) {
            assert!(
                Instant::now() < deadline,
                "the Sentinels did not settle: {}",
                s.cli(0, &["SENTINEL", "CKQUORUM", "opb"])
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        s
    }

    fn cli(&self, i: usize, args: &[&str]) -> String {
        let port = self.sentinels[i].1.to_string();
        let out = Command::new(require("redis-cli")).args(["-p", &port]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(|(_, p, _)| format!("127.0.0.1:{p}")).collect();
        format!("redis+sentinel://{}/opb", hosts.join(","))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sentinel_failover_moves_counting_to_the_new_primary_and_it_stays_exact() {
    let sentinels = Sentinels::start().await;
    let up = Upstream::start().await;
    let spec = TempSpec::new("sentinel", SPEC);
    let mut obs = instances(2, &up.url(), &spec, &sentinels.url()).await;
    let statuses = burst(&obs, "/exact", "before", 60).await;
    assert_eq!((count(&statuses, 200), count(&statuses, 429)), (40, 20), "exact on the first primary");
    assert!(sentinels.primary.calls("evalsha") > 0 && sentinels.replica.calls("evalsha") == 0);

    let load = Load::start(obs.iter().map(|o| o.url("/load")).collect(), 8);
    let mark = marks(&obs);
    assert!(sentinels.cli(0, &["SENTINEL", "FAILOVER", "opb"]).contains("OK"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !sentinels.replica.cli(&["ROLE"]).starts_with("master") {
        assert!(Instant::now() < deadline, "the replica was never promoted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let promoted = Instant::now();
    for ob in &obs {
        let changed = ob.logged_at_least("store primary changed", 1);
        assert!(!changed.is_empty(), "no primary change within 5 s of the promotion: {:#?}", ob.logged("store"));
    }
    assert!(promoted.elapsed() < Duration::from_secs(5));
    let calls = sentinels.replica.calls("evalsha");
    let statuses = burst(&obs, "/exact", "after", 60).await;
    assert_eq!((count(&statuses, 200), count(&statuses, 429)), (40, 20), "exact on the new primary");
    assert!(sentinels.replica.calls("evalsha") >= calls + 60, "counted on the new primary");
    let (ok, _) = load.stop().await;
    assert!(ok > 0);
    assert_quiet(&obs, &mark, "a Sentinel failover");
    assert_alive(&mut obs);
}
