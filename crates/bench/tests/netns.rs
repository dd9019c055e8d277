//! Goal: the kernel's TCP runs through the emulated link between two network namespaces: it
//! sees the loss (and recovers it), the relay counts it, and nothing is left behind.
//! Method: a TCP echo server in namespace b, a client in namespace a sending 400 messages
//! through a link that loses 10% each way; then the namespaces are looked for. Needs root (CI
//! runs as root); elsewhere the test says it did not run.
#![cfg(target_os = "linux")]

use rally_bench::testbed::netns::{Side, TunLink, SERVER_IP};
use rally_netem::{LinkConfig, LossModel};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

#[test]
fn tcp_crosses_a_lossy_link_between_namespaces_and_leaves_nothing_behind() {
    let tag = format!("rally-test-{}", std::process::id());
    let link = LinkConfig {
        delay: Duration::from_millis(2),
        loss: LossModel::Bernoulli { probability: 0.1 },
        ..LinkConfig::default()
    };
    let tun = match TunLink::start(&tag, link, link, 5) {
        Ok(tun) => tun,
        Err(e) => {
            eprintln!("not run here (needs root, network namespaces and TUN): {e}");
            return;
        }
    };
    let server = tun
        .spawn_in(Side::B, || -> std::io::Result<()> {
            let listener = TcpListener::bind((SERVER_IP, 7000))?;
            let (mut stream, _) = listener.accept()?;
            let mut buf = [0u8; 4096];
            loop {
                let n = stream.read(&mut buf)?;
                if n == 0 {
                    return Ok(());
                }
                stream.write_all(&buf[..n])?;
            }
        })
        .unwrap();
    let client = tun
        .spawn_in(Side::A, || -> std::io::Result<Vec<u8>> {
            let to = SocketAddr::from((SERVER_IP, 7000));
            // The server thread may not be listening yet.
            let mut stream = (0..100)
                .find_map(|_| {
                    TcpStream::connect_timeout(&to, Duration::from_secs(1))
                        .map_err(|_| std::thread::sleep(Duration::from_millis(20)))
                        .ok()
                })
                .ok_or_else(|| std::io::Error::other("no connection"))?;
            stream.set_read_timeout(Some(Duration::from_secs(20)))?;
            stream.set_nodelay(true)?;
            let sent: Vec<u8> = (0..400u32).flat_map(|i| i.to_le_bytes()).collect();
            for chunk in sent.chunks(4) {
                stream.write_all(chunk)?;
                // Paced, so that segments go one by one and the loss falls on many.
                std::thread::sleep(Duration::from_micros(500));
            }
            let mut echoed = vec![0u8; sent.len()];
            stream.read_exact(&mut echoed)?;
            Ok(echoed)
        })
        .unwrap();
    let echoed = client.join().unwrap().unwrap().unwrap();
    let expected: Vec<u8> = (0..400u32).flat_map(|i| i.to_le_bytes()).collect();
    assert_eq!(echoed, expected, "TCP delivered every byte in order despite the loss");
    let stats = tun.stop().unwrap();
    assert!(stats.up.lost > 0 && stats.down.lost > 0, "the link lost packets: {stats:?}");
    drop(server);
    let listed = std::process::Command::new("ip").args(["netns", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(!listed.contains(&tag), "namespaces left behind: {listed}");
}
