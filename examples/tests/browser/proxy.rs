//! A TCP proxy on loopback in front of `cca server`, for breaking the browser's connections on
//! purpose: [`Proxy::cut`] closes every open connection (an open `/changes` stream among them)
//! and refuses new ones until [`Proxy::restore`].

use std::io::copy;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

/// The proxy; it stops accepting when the test process ends.
pub(crate) struct Proxy {
    url: String,
    refusing: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream` (`host:port`).
    pub(crate) fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let refusing = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::new()));
        let (upstream, flag, streams) = (upstream.to_owned(), refusing.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if flag.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let pipes = (client.try_clone(), server.try_clone());
                let (Ok(client_out), Ok(server_out)) = pipes else {
                    continue;
                };
                streams.lock().extend(
                    [client.try_clone(), server.try_clone()]
                        .into_iter()
                        .flatten(),
                );
                pump(client, server_out);
                pump(server, client_out);
            }
        });
        Proxy {
            url,
            refusing,
            open,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Closes every open connection and refuses new ones.
    pub(crate) fn cut(&self) {
        self.refusing.store(true, Ordering::SeqCst);
        for stream in self.open.lock().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Accepts connections again.
    pub(crate) fn restore(&self) {
        self.refusing.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` in a thread until either side closes.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let _ = copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}
