//! Accepts TCP (and, on the MQTTS port, TLS) connections and serves each as an
//! MQTT connection.

use std::sync::Arc;

use tokio::net::TcpListener;

use super::connection::serve;
use super::context::MqttContext;
use crate::transport::accept;
use crate::transport::tls::TlsAcceptor;

/// Accepts plain connections until shutdown; each gets its own task.
pub async fn accept_loop(listener: TcpListener, ctx: Arc<MqttContext>) {
    let shutdown = ctx.shutdown.clone();
    accept::accept_loop(listener, shutdown, |stream, peer| {
        ctx.tasks.spawn(serve(ctx.clone(), stream, peer));
    })
    .await
}

/// Accepts TLS connections until shutdown; each gets its own task, which runs
/// the TLS handshake and then serves MQTT over it.
pub async fn accept_tls_loop(listener: TcpListener, tls: Arc<TlsAcceptor>, ctx: Arc<MqttContext>) {
    let shutdown = ctx.shutdown.clone();
    accept::accept_loop(listener, shutdown, |tcp, peer| {
        let (ctx2, tls) = (ctx.clone(), tls.clone());
        ctx.tasks.spawn(async move {
            if let Some((stream, peer)) = tls.handshake(tcp, peer).await {
                serve(ctx2, stream, peer).await;
            }
        });
    })
    .await
}
