//! The command line of `lavinmqctl`: LavinMQ's command names (snake_case),
//! their positional arguments and flags, and the global options, which may be
//! given before or after the command.

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

/// Where the broker's control socket is unless told otherwise.
pub const DEFAULT_CONTROL_UNIX_PATH: &str = "/tmp/lavinmqctl.sock";

/// `lavinmqctl [global options] <command> [arguments]`.
#[derive(Debug, Parser)]
#[command(
    name = "lavinmqctl",
    about = "Administers a running LavinMQ broker over its control socket or its HTTP API",
    version,
    disable_version_flag = true
)]
pub struct Cli {
    /// Options every command accepts.
    #[command(flatten)]
    pub global: GlobalOpts,
    /// What to do.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// How a command prints what it got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned tables and `key: value` lines, for people.
    #[default]
    Text,
    /// One JSON document, for scripts.
    Json,
}

/// The global options, LavinMQ's names and short flags.
#[derive(Debug, Args)]
pub struct GlobalOpts {
    /// Virtual host the command acts in (default /)
    #[arg(short = 'p', long, global = true, value_name = "VHOST")]
    pub vhost: Option<String>,
    /// Talk to the HTTP API at this URI instead of the control socket
    /// (http://user:password@host:port)
    #[arg(short = 'U', long, global = true, value_name = "URI")]
    pub uri: Option<String>,
    /// Same as --uri (deprecated)
    #[arg(short = 'H', long, global = true, env = "LAVINMQCTL_HOST", value_name = "URI")]
    pub host: Option<String>,
    /// Host name of the HTTP API, instead of the control socket
    #[arg(long, global = true)]
    pub hostname: Option<String>,
    /// Port of the HTTP API with --hostname
    #[arg(short = 'P', long, global = true)]
    pub port: Option<u16>,
    /// Scheme of the HTTP API with --hostname
    #[arg(long, global = true)]
    pub scheme: Option<String>,
    /// User name for the HTTP API (overrides the URI's)
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// Password for the HTTP API (overrides the URI's)
    #[arg(long, global = true)]
    pub password: Option<String>,
    /// Path of the broker's control socket
    #[arg(
        long,
        global = true,
        env = "LAVINMQCTL_CONTROL_UNIX_PATH",
        default_value = DEFAULT_CONTROL_UNIX_PATH,
        value_name = "PATH"
    )]
    pub control_unix_path: PathBuf,
    /// Node name (accepted and ignored, for rabbitmqctl compatibility)
    #[arg(short = 'n', long, global = true)]
    pub node: Option<String>,
    /// Suppress informational messages
    #[arg(short = 'q', long, global = true)]
    pub quiet: bool,
    /// Suppress informational messages and table formatting (tab-separated rows, no header)
    #[arg(short = 's', long, global = true)]
    pub silent: bool,
    /// Output format
    #[arg(short = 'f', long, global = true, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Print the version and exit
    #[arg(short = 'v', long, action = ArgAction::Version)]
    pub version: Option<bool>,
    /// Print build information and exit
    #[arg(long)]
    pub build_info: bool,
}

/// Columns a listing shows: the ones named, or the command's defaults.
#[derive(Debug, Args)]
pub struct Columns {
    /// Fields to show (dotted paths reach into objects, e.g. message_stats.publish)
    #[arg(value_name = "COLUMN")]
    pub columns: Vec<String>,
}

/// The commands, named as in LavinMQ.
#[derive(Debug, Subcommand)]
#[command(rename_all = "snake_case")]
pub enum Command {
    /// Creates a new user
    AddUser {
        /// User name
        username: String,
        /// Password in clear text
        password: String,
    },
    /// Deletes a user
    DeleteUser {
        /// User name
        username: String,
    },
    /// Lists user names and tags
    ListUsers(Columns),
    /// Changes a user's password (keeping its tags)
    ChangePassword {
        /// User name
        username: String,
        /// The new password in clear text
        new_password: String,
    },
    /// Sets a user's tags (none clears them)
    SetUserTags {
        /// User name
        username: String,
        /// Tags such as administrator, monitoring, management, policymaker
        tags: Vec<String>,
    },
    /// Sets a user's permissions in the vhost (-p)
    SetPermissions {
        /// User name
        username: String,
        /// Regex of the resources the user may configure
        configure: String,
        /// Regex of the resources the user may write to
        write: String,
        /// Regex of the resources the user may read from
        read: String,
    },
    /// Sets a user's topic permissions on a topic exchange of the vhost (-p)
    SetTopicPermissions {
        /// User name
        username: String,
        /// Topic exchange name
        exchange: String,
        /// Regex of the routing keys the user may publish with
        write: String,
        /// Regex of the binding keys the user may bind or subscribe with
        read: String,
    },
    /// Clears a user's topic permissions in the vhost (-p): on one exchange, or all
    ClearTopicPermissions {
        /// User name
        username: String,
        /// Topic exchange name (all of the user's in the vhost when left out)
        exchange: Option<String>,
    },
    /// Lists the topic permissions of every user in the vhost (-p)
    ListTopicPermissions(Columns),
    /// Lists a user's topic permissions in every vhost
    ListUserTopicPermissions {
        /// User name
        username: String,
        /// Fields to show
        #[arg(value_name = "COLUMN")]
        columns: Vec<String>,
    },
    /// Sets limits of a user from JSON, e.g. '{"max-connections":10,"max-channels":50}'
    SetUserLimits {
        /// User name
        username: String,
        /// The limits as a JSON object
        json: String,
    },
    /// Clears one limit of a user (max-connections, max-channels) or all of them
    ClearUserLimits {
        /// User name
        username: String,
        /// The limit's name, or all
        limit: String,
    },
    /// Prints the RabbitMQ SHA-256 hash of a password (computed locally)
    HashPassword {
        /// Password in clear text
        password: String,
    },
    /// Lists virtual hosts
    ListVhosts(Columns),
    /// Creates a virtual host
    AddVhost {
        /// Vhost name
        vhost: String,
    },
    /// Deletes a virtual host
    DeleteVhost {
        /// Vhost name
        vhost: String,
    },
    /// Sets limits of the vhost (-p) from JSON, e.g. '{"max-queues":10,"max-connections":5}'
    SetVhostLimits {
        /// The limits as a JSON object
        json: String,
    },
    /// Lists queues of the vhost (-p) and their message counts
    ListQueues(Columns),
    /// Creates a queue in the vhost (-p)
    CreateQueue(CreateQueue),
    /// Deletes a queue
    DeleteQueue(DeleteQueue),
    /// Purges a queue (removes all messages in it)
    PurgeQueue {
        /// Queue name
        queue: String,
    },
    /// Pauses all consumers on a queue
    PauseQueue {
        /// Queue name
        queue: String,
    },
    /// Resumes all consumers on a queue
    ResumeQueue {
        /// Queue name
        queue: String,
    },
    /// Restarts a closed queue (reopens its files)
    RestartQueue {
        /// Queue name
        queue: String,
    },
    /// Lists exchanges of the vhost (-p)
    ListExchanges(Columns),
    /// Creates an exchange in the vhost (-p)
    CreateExchange(CreateExchange),
    /// Deletes an exchange
    DeleteExchange {
        /// Exchange name
        name: String,
    },
    /// Creates a super stream in the vhost (-p): an exchange and its partition streams
    AddSuperStream(AddSuperStream),
    /// Deletes a super stream: its partition streams and its exchange
    DeleteSuperStream {
        /// Super stream name
        name: String,
    },
    /// Lists policies of the vhost (-p)
    ListPolicies(Columns),
    /// Sets or updates a policy in the vhost (-p)
    SetPolicy(SetPolicy),
    /// Clears (removes) a policy
    ClearPolicy {
        /// Policy name
        name: String,
    },
    /// Lists shovels of the vhost (-p) with their state
    #[command(alias = "shovel_status")]
    ListShovels(Columns),
    /// Creates or replaces a shovel in the vhost (-p) from its JSON definition
    /// (the keys of a `shovel` parameter: src-uri, src-queue, dest-uri, ...)
    AddShovel {
        /// Shovel name
        name: String,
        /// Definition, such as {"src-uri":"amqp://","src-queue":"a","dest-uri":"amqp://","dest-queue":"b"}
        definition: String,
    },
    /// Deletes a shovel
    DeleteShovel {
        /// Shovel name
        name: String,
    },
    /// Stops a shovel and starts it again
    RestartShovel {
        /// Shovel name
        name: String,
    },
    /// Lists federation upstreams of the vhost (-p)
    ListFederations(Columns),
    /// Creates or replaces a federation upstream in the vhost (-p)
    AddFederation(AddFederation),
    /// Deletes a federation upstream
    DeleteFederation {
        /// Upstream name
        name: String,
    },
    /// Lists federation links of the vhost (-p) with their state
    #[command(name = "federation_status", alias = "list_federation_links")]
    FederationStatus(Columns),
    /// Lists client connections (of the vhost with -p, else all)
    ListConnections(Columns),
    /// Closes a connection by name
    CloseConnection {
        /// Connection name, as list_connections name shows it
        name: String,
        /// Text the client is told (default: Closed via lavinmqctl)
        reason: Option<String>,
    },
    /// Closes all connections (of the vhost with -p, else all)
    CloseAllConnections {
        /// Text the clients are told (default: Closed via lavinmqctl)
        reason: Option<String>,
    },
    /// Prints the definitions (of the vhost with -p) as JSON
    ExportDefinitions,
    /// Imports definitions from a JSON file ('-' reads standard input)
    ImportDefinitions {
        /// JSON file with the definitions, or - for standard input
        file: PathBuf,
    },
    /// Generates definitions JSON from a data directory (the broker must not be running on it)
    Definitions {
        /// The broker's data directory
        data_dir: PathBuf,
    },
    /// Displays the broker's status
    Status,
    /// Displays the cluster's status: every node with its role, in-sync state and replication lag
    ClusterStatus,
    /// Accepted for compatibility; does nothing (as in LavinMQ)
    StopApp,
    /// Accepted for compatibility; does nothing (as in LavinMQ)
    StartApp,
}

/// `create_queue <name>` and its flags (each sets a queue argument).
#[derive(Debug, Args)]
pub struct CreateQueue {
    /// Queue name
    pub name: String,
    /// Delete the queue when its last consumer goes away
    #[arg(long)]
    pub auto_delete: bool,
    /// Keep the queue across restarts
    #[arg(long)]
    pub durable: bool,
    /// Delete the queue after it has been unused this many milliseconds (x-expires)
    #[arg(long, value_name = "MS")]
    pub expires: Option<i64>,
    /// Most messages the queue holds (x-max-length)
    #[arg(long, value_name = "N")]
    pub max_length: Option<i64>,
    /// Message time to live in milliseconds (x-message-ttl)
    #[arg(long, value_name = "MS")]
    pub message_ttl: Option<i64>,
    /// Deliveries before a message is dead-lettered (x-delivery-limit)
    #[arg(long, value_name = "N")]
    pub delivery_limit: Option<i64>,
    /// Reject publishes when full instead of dropping the oldest (x-overflow)
    #[arg(long)]
    pub reject_on_overflow: bool,
    /// Exchange dead-lettered messages go to (x-dead-letter-exchange)
    #[arg(long, value_name = "EXCHANGE")]
    pub dead_letter_exchange: Option<String>,
    /// Routing key of dead-lettered messages (x-dead-letter-routing-key)
    #[arg(long, value_name = "KEY")]
    pub dead_letter_routing_key: Option<String>,
    /// Create a stream queue (x-queue-type=stream)
    #[arg(long)]
    pub stream_queue: bool,
}

/// `delete_queue <name>` and its conditions.
#[derive(Debug, Args)]
pub struct DeleteQueue {
    /// Queue name
    pub name: String,
    /// Only delete the queue if it has no consumers
    #[arg(long)]
    pub if_unused: bool,
    /// Only delete the queue if it holds no messages
    #[arg(long)]
    pub if_empty: bool,
}

/// `add_super_stream <name>` and its flags, as RabbitMQ's
/// `rabbitmq-streams add_super_stream` takes them.
#[derive(Debug, Args)]
pub struct AddSuperStream {
    /// Super stream name
    pub name: String,
    /// Number of partitions (3 unless --routing-keys names them)
    #[arg(long, value_name = "N", conflicts_with = "routing_keys")]
    pub partitions: Option<u32>,
    /// Comma-separated binding keys, one partition each (NAME-KEY)
    #[arg(long, value_name = "KEYS")]
    pub routing_keys: Option<String>,
    /// Most bytes each partition keeps (max-length-bytes)
    #[arg(long, value_name = "BYTES")]
    pub max_length_bytes: Option<i64>,
    /// How long each partition keeps messages, e.g. 7D or 12h (max-age)
    #[arg(long, value_name = "AGE")]
    pub max_age: Option<String>,
    /// Segment size of each partition (stream-max-segment-size-bytes)
    #[arg(long, value_name = "BYTES")]
    pub stream_max_segment_size_bytes: Option<i64>,
}

/// `create_exchange <type> <name>` and its flags.
#[derive(Debug, Args)]
pub struct CreateExchange {
    /// Exchange type (direct, fanout, topic, headers, x-consistent-hash, ...)
    #[arg(value_name = "TYPE")]
    pub kind: String,
    /// Exchange name
    pub name: String,
    /// Delete the exchange when its last binding goes away
    #[arg(long)]
    pub auto_delete: bool,
    /// Keep the exchange across restarts
    #[arg(long)]
    pub durable: bool,
    /// Clients may not publish to it directly
    #[arg(long)]
    pub internal: bool,
    /// Hold messages for their x-delay before routing them (x-delayed-exchange)
    #[arg(long)]
    pub delayed: bool,
    /// Where unroutable messages go (x-alternate-exchange)
    #[arg(long, value_name = "EXCHANGE")]
    pub alternate_exchange: Option<String>,
    /// Messages to keep in the exchange (x-persist-messages)
    #[arg(long, value_name = "N")]
    pub persist_messages: Option<i64>,
    /// Milliseconds to keep messages in the exchange (x-persist-ms)
    #[arg(long, value_name = "MS")]
    pub persist_ms: Option<i64>,
}

/// `add_federation <name> --uri=<uri>` and the upstream's other settings,
/// as LavinMQ's lavinmqctl takes them.
#[derive(Debug, Args)]
pub struct AddFederation {
    /// Upstream name
    pub name: String,
    /// The upstream broker's AMQP URI. `--uri=amqp://...` after the command
    /// name (LavinMQ's spelling) means this too: an amqp(s):// value is not an
    /// HTTP API address.
    #[arg(long)]
    pub upstream_uri: Option<String>,
    /// Expiry of the upstream queue, in seconds
    #[arg(long)]
    pub expires: Option<u64>,
    /// Message TTL on the upstream queue, in milliseconds
    #[arg(long)]
    pub message_ttl: Option<u64>,
    /// How many links a message may cross
    #[arg(long)]
    pub max_hops: Option<u64>,
    /// Prefetch count on the upstream
    #[arg(long)]
    pub prefetch_count: Option<u64>,
    /// Seconds to wait before reconnecting
    #[arg(long)]
    pub reconnect_delay: Option<u64>,
    /// on-confirm, on-publish or no-ack
    #[arg(long)]
    pub ack_mode: Option<String>,
    /// Consumer tag on the upstream
    #[arg(long)]
    pub consumer_tag: Option<String>,
    /// The upstream exchange, when not named as the federated one
    #[arg(long)]
    pub exchange: Option<String>,
    /// The upstream queue, when not named as the federated one
    #[arg(long)]
    pub queue: Option<String>,
}

/// `set_policy <name> <pattern> <definition>` and its flags.
#[derive(Debug, Args)]
pub struct SetPolicy {
    /// Policy name
    pub name: String,
    /// Regular expression the names of queues/exchanges must match
    pub pattern: String,
    /// The policy's definition as a JSON object, e.g. '{"max-length":10}'
    pub definition: String,
    /// Higher priority policies win over lower ones
    #[arg(long, default_value_t = 0)]
    pub priority: i64,
    /// What the policy applies to: queues, exchanges or all
    #[arg(long, default_value = "all")]
    pub apply_to: String,
}
