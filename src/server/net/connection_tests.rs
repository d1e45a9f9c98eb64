use super::*;

#[tokio::test(start_paused = true)]
async fn a_connection_is_parked_only_after_a_quiet_period_without_a_request() {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut quiet = Quiet::default();
    assert!(!quiet.for_a_while(1, &mut cx), "just idle: not yet");
    tokio::time::advance(PARK_AFTER / 2).await;
    assert!(!quiet.for_a_while(1, &mut cx));
    // A request came and went within the period: the period starts again from the next look.
    tokio::time::advance(PARK_AFTER / 2).await;
    assert!(!quiet.for_a_while(2, &mut cx), "busy within the period");
    tokio::time::advance(PARK_AFTER - Duration::from_millis(1)).await;
    assert!(!quiet.for_a_while(2, &mut cx));
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(quiet.for_a_while(2, &mut cx), "a whole period without a request");
    // Parked and served again: a new period.
    assert!(!quiet.for_a_while(3, &mut cx));
    tokio::time::advance(PARK_AFTER).await;
    assert!(quiet.for_a_while(3, &mut cx));
}

#[test]
fn bytes_read_ahead_come_before_those_left_unread_in_a_buffer_of_their_own() {
    assert_eq!(join(b"GET / HT", b"TP/1.1"), "GET / HTTP/1.1");
    assert_eq!(join(b"", b"abc"), "abc");
    assert_eq!(join(b"abc", b""), "abc");
}
