//! Goal: the delay relay carries datagrams both ways and never delivers one early.
//! Method: a UDP echo behind a relay of 20 ms each way; a few round trips on loopback.

use rally_driver::DelayRelay;
use std::net::UdpSocket;
use std::time::Duration;

#[test]
#[allow(clippy::disallowed_methods)] // a real-time test reads the clock
fn datagrams_cross_both_ways_no_sooner_than_the_delay() {
    let echo = UdpSocket::bind("127.0.0.1:0").unwrap();
    let echo_address = echo.local_addr().unwrap();
    let echoing = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        for _ in 0..3 {
            let (len, from) = echo.recv_from(&mut buf).unwrap();
            echo.send_to(&buf[..len], from).unwrap();
        }
    });
    let relay = DelayRelay::start(echo_address, Duration::from_millis(20)).unwrap();
    let client = UdpSocket::bind("127.0.0.1:0").unwrap();
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for n in 0..3u8 {
        let sent = std::time::Instant::now();
        client.send_to(&[n; 8], relay.address()).unwrap();
        let mut buf = [0u8; 64];
        let (len, _) = client.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..len], &[n; 8]);
        let rtt = sent.elapsed();
        assert!(rtt >= Duration::from_millis(40), "round trip {rtt:?} beat the relay's delay");
    }
    echoing.join().unwrap();
    relay.stop().unwrap();
}
