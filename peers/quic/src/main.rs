//! QUIC (quinn, one bidirectional stream) on the W1 workload of Rally's transport shootout
//! (docs/design.md). `rally-bench transport --mode real` builds it (`cargo build --release
//! -p rally-quic-peer`) and runs both sides through its link emulator.
//!
//! - `rally-quic-peer server`: prints `listening ADDR CERT` (the self-signed certificate, DER
//!   in hex, which the client trusts) and echoes every stream until its standard input closes.
//! - `rally-quic-peer client SERVER CERT SECONDS`: sends a 400-byte payload every 1/60 s for
//!   SECONDS, waits up to half a second for the last echoes, and prints one JSON line: the
//!   round trips (ms, from handing a payload to quinn to its echo) and the payloads sent.
//!
//! quinn's defaults throughout (its congestion controller, its initial RTT estimate), as a
//! user gets them.

// A real-time peer program: it reads the OS clock, as the driver does.
#![allow(clippy::disallowed_methods)]

use std::error::Error;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

const PAYLOAD_BYTES: usize = 400;
const SEND_INTERVAL: Duration = Duration::from_nanos(16_666_667);
const DRAIN: Duration = Duration::from_millis(500);

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let outcome = runtime.map_err(Into::into).and_then(|rt| {
        rt.block_on(async {
            match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                ["server"] => server().await,
                ["client", server, cert, seconds] => client(server, cert, seconds).await,
                _ => Err("usage: rally-quic-peer server | client SERVER CERT SECONDS".into()),
            }
        })
    });
    if let Err(e) = outcome {
        eprintln!("rally-quic-peer: {e}");
        std::process::exit(1);
    }
}

async fn server() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".into()])?;
    let cert = certified.cert.der().clone();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(certified.key_pair.serialize_der());
    let config = quinn::ServerConfig::with_single_cert(vec![cert.clone()], key.into())?;
    let endpoint = quinn::Endpoint::server(config, "127.0.0.1:0".parse()?)?;
    let hex: String = cert.iter().map(|b| format!("{b:02x}")).collect();
    println!("listening {} {hex}", endpoint.local_addr()?);
    let accepting = endpoint.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            tokio::spawn(async move {
                let Ok(connection) = incoming.await else { return };
                while let Ok((mut send, mut recv)) = connection.accept_bi().await {
                    tokio::spawn(async move {
                        let mut buf = [0u8; PAYLOAD_BYTES];
                        while recv.read_exact(&mut buf).await.is_ok() {
                            if send.write_all(&buf).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            });
        }
    });
    // The parent closes our standard input (or dies) to stop us.
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    endpoint.close(0u32.into(), b"done");
    Ok(())
}

async fn client(server: &str, cert: &str, seconds: &str) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let server: SocketAddr = server.parse()?;
    let duration = Duration::from_secs_f64(seconds.parse()?);
    let der: Vec<u8> = (0..cert.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(cert.get(i..i + 2).unwrap_or("zz"), 16))
        .collect::<std::result::Result<_, _>>()?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(der))?;
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse()?)?;
    endpoint
        .set_default_client_config(quinn::ClientConfig::with_root_certificates(Arc::new(roots))?);
    let connection = endpoint.connect(server, "localhost")?.await?;
    let (mut send, mut recv) = connection.open_bi().await?;
    let sent_at: Arc<Mutex<Vec<Option<Instant>>>> = Arc::default();
    let rtts: Arc<Mutex<Vec<f64>>> = Arc::default();
    let (at, done) = (sent_at.clone(), rtts.clone());
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; PAYLOAD_BYTES];
        while recv.read_exact(&mut buf).await.is_ok() {
            let now = Instant::now();
            let index = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            let sent =
                at.lock().unwrap_or_else(|p| p.into_inner()).get_mut(index).and_then(Option::take);
            if let Some(sent) = sent {
                done.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((now - sent).as_secs_f64() * 1e3);
            }
        }
    });
    let start = Instant::now();
    let mut payload = [0u8; PAYLOAD_BYTES];
    let mut sent = 0u32;
    while start.elapsed() < duration {
        tokio::time::sleep_until((start + SEND_INTERVAL * sent).into()).await;
        payload[..4].copy_from_slice(&sent.to_le_bytes());
        sent_at.lock().unwrap_or_else(|p| p.into_inner()).push(Some(Instant::now()));
        send.write_all(&payload).await?;
        sent += 1;
    }
    let deadline = Instant::now() + DRAIN;
    while Instant::now() < deadline
        && rtts.lock().unwrap_or_else(|p| p.into_inner()).len() < sent as usize
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    reader.abort();
    let rtts = rtts.lock().unwrap_or_else(|p| p.into_inner()).clone();
    println!("{}", serde_json::json!({ "rtts_ms": rtts, "sent": sent }));
    connection.close(0u32.into(), b"done");
    Ok(())
}
