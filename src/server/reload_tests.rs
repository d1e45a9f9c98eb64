use super::*;

/// Issue 63: a reload stuck in a slow parse kept the reloader waiting, so no poll after it
/// was read. Past its deadline the runner stops waiting; while it runs on, new reloads are
/// not started; when it ends, the spec is asked for again; then reloads run as before.
#[tokio::test(start_paused = true)]
async fn a_reload_past_its_deadline_is_late_and_the_reloads_after_it_go_on() {
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let deadline = Duration::from_secs(30);
    let mut runner = Runner::new(deadline, tx);
    let (release, stuck) = std::sync::mpsc::channel::<()>();
    let task = tokio::spawn(async move {
        let ran = runner.run(move || stuck.recv().map_or(Reloaded::Unchanged, |()| Reloaded::Restored)).await;
        (runner, ran)
    });
    // The blocking thread holds the clock still; time moves when the test says.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    tokio::time::advance(deadline + Duration::from_millis(1)).await;
    let (mut runner, ran) = task.await.unwrap();
    assert_eq!(ran, Ran::Late);
    assert_eq!(runner.run(|| Reloaded::Unchanged).await, Ran::Busy, "one reload at a time");
    assert!(rx.try_recv().is_err(), "nothing asked for while it runs");
    release.send(()).unwrap();
    assert_eq!(rx.recv().await, Some(Trigger::File), "the spec is read again once it ends");
    assert_eq!(runner.run(|| Reloaded::Unchanged).await, Ran::Done(Reloaded::Unchanged));
    assert_eq!(runner.run(|| panic!("a bug")).await, Ran::Panicked);
    assert_eq!(runner.run(|| Reloaded::Unchanged).await, Ran::Done(Reloaded::Unchanged));
}
