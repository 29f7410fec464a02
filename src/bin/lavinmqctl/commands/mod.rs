//! The commands, grouped by what they administer, and the dispatch from a
//! parsed [`Command`] to the function that carries it out.

mod connections;
mod definitions;
mod exchanges;
mod federation;
mod policies;
mod queues;
mod server;
mod shovels;
mod super_streams;
mod users;
mod vhosts;

use crate::api::Api;
use crate::cli::{Columns, Command};
use crate::error::CtlResult;
use crate::output::Output;

/// The vhost commands act in when `-p` is not given.
const DEFAULT_VHOST: &str = "/";

/// What every command works with.
#[derive(Debug)]
pub struct Ctx {
    /// The broker's API.
    pub api: Api,
    /// Where results go.
    pub out: Output,
    /// The `-p/--vhost` option as given.
    pub vhost_option: Option<String>,
}

impl Ctx {
    /// The vhost to act in: `-p`, else `/`.
    pub fn vhost(&self) -> &str {
        self.vhost_option.as_deref().unwrap_or(DEFAULT_VHOST)
    }
}

/// The columns a listing shows: those named on the command line, else `default`.
fn columns(given: Columns, default: &[&str]) -> Vec<String> {
    if given.columns.is_empty() {
        default.iter().map(|c| c.to_string()).collect()
    } else {
        given.columns
    }
}

/// Carries out `command`.
pub async fn run(ctx: &Ctx, command: Command) -> CtlResult<()> {
    match command {
        Command::AddUser { username, password } => users::add(ctx, &username, &password).await,
        Command::DeleteUser { username } => users::delete(ctx, &username).await,
        Command::ListUsers(cols) => users::list(ctx, cols).await,
        Command::ChangePassword { username, new_password } => {
            users::change_password(ctx, &username, &new_password).await
        }
        Command::SetUserTags { username, tags } => users::set_tags(ctx, &username, &tags).await,
        Command::SetPermissions {
            username,
            configure,
            write,
            read,
        } => users::set_permissions(ctx, &username, &configure, &write, &read).await,
        Command::SetTopicPermissions {
            username,
            exchange,
            write,
            read,
        } => users::set_topic_permissions(ctx, &username, &exchange, &write, &read).await,
        Command::ClearTopicPermissions { username, exchange } => {
            users::clear_topic_permissions(ctx, &username, exchange.as_deref()).await
        }
        Command::ListTopicPermissions(cols) => users::list_topic_permissions(ctx, cols).await,
        Command::ListUserTopicPermissions { username, columns } => {
            users::list_user_topic_permissions(ctx, &username, Columns { columns }).await
        }
        Command::SetUserLimits { username, json } => users::set_limits(ctx, &username, &json).await,
        Command::ClearUserLimits { username, limit } => users::clear_limits(ctx, &username, &limit).await,
        Command::HashPassword { password } => users::hash_password(ctx, &password),
        Command::ListVhosts(cols) => vhosts::list(ctx, cols).await,
        Command::AddVhost { vhost } => vhosts::add(ctx, &vhost).await,
        Command::DeleteVhost { vhost } => vhosts::delete(ctx, &vhost).await,
        Command::SetVhostLimits { json } => vhosts::set_limits(ctx, &json).await,
        Command::ListQueues(cols) => queues::list(ctx, cols).await,
        Command::CreateQueue(args) => queues::create(ctx, &args).await,
        Command::DeleteQueue(args) => queues::delete(ctx, &args).await,
        Command::PurgeQueue { queue } => queues::purge(ctx, &queue).await,
        Command::PauseQueue { queue } => queues::pause(ctx, &queue).await,
        Command::ResumeQueue { queue } => queues::resume(ctx, &queue).await,
        Command::RestartQueue { queue } => queues::restart(ctx, &queue).await,
        Command::ListExchanges(cols) => exchanges::list(ctx, cols).await,
        Command::CreateExchange(args) => exchanges::create(ctx, &args).await,
        Command::DeleteExchange { name } => exchanges::delete(ctx, &name).await,
        Command::AddSuperStream(args) => super_streams::add(ctx, &args).await,
        Command::DeleteSuperStream { name } => super_streams::delete(ctx, &name).await,
        Command::ListPolicies(cols) => policies::list(ctx, cols).await,
        Command::SetPolicy(args) => policies::set(ctx, &args).await,
        Command::ClearPolicy { name } => policies::clear(ctx, &name).await,
        Command::ListShovels(cols) => shovels::list(ctx, cols).await,
        Command::ListFederations(cols) => federation::list(ctx, cols).await,
        Command::AddFederation(a) => federation::add(ctx, &a).await,
        Command::DeleteFederation { name } => federation::delete(ctx, &name).await,
        Command::FederationStatus(cols) => federation::status(ctx, cols).await,
        Command::AddShovel { name, definition } => shovels::add(ctx, &name, &definition).await,
        Command::DeleteShovel { name } => shovels::delete(ctx, &name).await,
        Command::RestartShovel { name } => shovels::restart(ctx, &name).await,
        Command::ListConnections(cols) => connections::list(ctx, cols).await,
        Command::CloseConnection { name, reason } => connections::close(ctx, &name, reason.as_deref()).await,
        Command::CloseAllConnections { reason } => connections::close_all(ctx, reason.as_deref()).await,
        Command::ExportDefinitions => definitions::export(ctx).await,
        Command::ImportDefinitions { file } => definitions::import(ctx, &file).await,
        Command::Definitions { data_dir } => definitions::from_data_dir(ctx, &data_dir),
        Command::Status => server::status(ctx).await,
        Command::ClusterStatus => server::cluster_status(ctx).await,
        // LavinMQ registers these and does nothing; scripts that call them keep working.
        Command::StopApp | Command::StartApp => Ok(()),
    }
}
