//! Accepts TCP connections and serves each as an MQTT connection.

use std::sync::Arc;

use tokio::net::TcpListener;

use super::connection::serve;
use super::context::MqttContext;

/// Accepts connections until shutdown; each gets its own task.
pub async fn accept_loop(listener: TcpListener, ctx: Arc<MqttContext>) {
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let local = stream.local_addr().unwrap_or(peer);
                    let ctx2 = ctx.clone();
                    ctx.tasks.spawn(serve(ctx2, stream, peer, local));
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = ctx.shutdown.cancelled() => return,
        }
    }
}
