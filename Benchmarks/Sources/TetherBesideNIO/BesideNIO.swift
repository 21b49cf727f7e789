// Tether beside SwiftNIO: a file that imports Tether, NIOCore, NIOPosix and NIOHTTP1 and
// names the types of both without qualifying one. It is built with the benchmark package
// (which depends on SwiftNIO) by CI, so a Tether type that takes a name SwiftNIO uses fails
// the build here before it reaches an app that imports both.
//
// Tether's names that SwiftNIO also uses carry the module's name (TetherSocketAddress,
// TetherEventLoopGroup, TetherHTTPHeaders, TetherHTTPMethod) or live inside the type they
// belong to (FrameBuffer.Endianness), the way grpc-swift and valkey-swift prefix theirs.

import NIOCore
import NIOHTTP1
import NIOPosix
import Tether
import TetherHTTP
import TetherUDP

/// Every public top-level type of Tether, TetherHTTP and TetherUDP, by its plain name.
let tetherTypes: [Any.Type] = [
    AdaptiveHeartbeat.self,
    ChecksumAlgorithm.self,
    ClientHello.self,
    ClusterClaim.self,
    ClusterNode.self,
    ClusterSession.self,
    ConnectReport.self,
    Connection.self,
    ConnectionConfiguration.self,
    ConnectionMetrics.self,
    (any ConnectionObserver).self,
    ConnectionState.self,
    Datagram.self,
    DatagramConfiguration.self,
    DatagramSequence.self,
    DatagramSocket.self,
    DrainConfiguration.self,
    Endpoint.self,
    FallbackPolicy.self,
    Frame.self,
    FrameBuffer.self,
    FrameBuffer.Endianness.self,
    (any FrameCodec).self,
    FrameIntegrity.self,
    FrameLayout.self,
    HTTPAllowedHost.self,
    HTTPExchangeRecord.self,
    HTTPForwarder.self,
    HTTPForwardingConfiguration.self,
    HTTPForwardingError.self,
    HTTPProxy.self,
    HTTPRequest.self,
    HTTPResponse.self,
    Heartbeat.self,
    HeartbeatConfiguration.self,
    HeartbeatMemory.self,
    InMemoryMailboxStore.self,
    JSONValue.self,
    Limits.self,
    MailboxConfiguration.self,
    MailboxLimits.self,
    MailboxLossReason.self,
    MailboxMessage.self,
    (any MailboxStore).self,
    MailboxSummary.self,
    MailboxTime.self,
    NetworkPath.self,
    ObservedRequest.self,
    OfflinePush.self,
    (any PathMonitor).self,
    PathObservation.self,
    Peer.self,
    PeerID.self,
    PeerMetrics.self,
    Profile.self,
    ProgressConfiguration.self,
    ReconnectPolicy.self,
    Request.self,
    RequestOutcome.self,
    RequestTimeout.self,
    Response.self,
    SendCompletion.self,
    Server.self,
    ServerConfiguration.self,
    ServerEvent.self,
    ServerMetrics.self,
    (any ServerObserver).self,
    (any SessionCluster).self,
    SessionConfiguration.self,
    SessionEvent.self,
    SessionIdentity.self,
    SessionIdentityContext.self,
    SessionIdentityProvider.self,
    SessionWireTypes.self,
    Subscription<Frame>.self,
    SystemPathMonitor.self,
    TLSConfiguration.self,
    TLSDetails.self,
    TetherError.self,
    TetherEventLoopGroup.self,
    TetherHTTPHeaders.self,
    TetherHTTPMethod.self,
    (any TetherObserver).self,
    TetherSocketAddress.self,
    TransferProgress.self,
    UnixSocketConfiguration.self,
    WebSocketClientConfiguration.self,
    WebSocketServerConfiguration.self,
]

/// The SwiftNIO types whose names Tether's once were, by their plain names.
let nioTypes: [Any.Type] = [
    SocketAddress.self,
    (any EventLoopGroup).self,
    HTTPHeaders.self,
    HTTPMethod.self,
    Endianness.self,
    MultiThreadedEventLoopGroup.self,
    ByteBuffer.self,
]

/// Both in one function, as an app that bridges them writes it.
func bridge(_ nio: SocketAddress, headers: HTTPHeaders) -> (TetherSocketAddress?, TetherHTTPHeaders) {
    let tetherHeaders = TetherHTTPHeaders(headers.map { ($0.name, $0.value) })
    let address = nio.ipAddress.flatMap { TetherSocketAddress(ipAddress: $0, port: nio.port ?? 0) }
    let method: TetherHTTPMethod = .get
    let endianness: FrameBuffer.Endianness = .big
    _ = (method, endianness, Endianness.big, HTTPMethod.GET)
    return (address, tetherHeaders)
}
