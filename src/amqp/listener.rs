//! Accepts TCP (and, on the AMQPS port, TLS) connections and serves each as an
//! AMQP connection.

use std::sync::Arc;

use tokio::net::TcpListener;

use super::connection::serve;
use super::context::AmqpContext;
use crate::transport::accept;
use crate::transport::tls::TlsAcceptor;

/// Accepts plain connections until shutdown; each gets its own task.
pub async fn accept_loop(listener: TcpListener, ctx: Arc<AmqpContext>) {
    let shutdown = ctx.shutdown.clone();
    accept::accept_loop(listener, shutdown, |stream, peer| {
        ctx.tasks.spawn(serve(ctx.clone(), stream, peer));
    })
    .await
}

/// Accepts TLS connections until shutdown; each gets its own task, which runs
/// the TLS handshake and then serves AMQP over it.
pub async fn accept_tls_loop(listener: TcpListener, tls: Arc<TlsAcceptor>, ctx: Arc<AmqpContext>) {
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
