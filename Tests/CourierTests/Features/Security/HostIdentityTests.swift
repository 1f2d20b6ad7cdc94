import Courier
import CourierAsyncHTTPClient
import CourierTestServer
import Crypto
import Foundation
import Testing

/// Host identity on the AsyncHTTPClient transport: which names a certificate may prove, and pins
/// per host and port. AsyncHTTPClient only: on URLSession, trust and pins are evaluated by the
/// Security framework (Apple platforms; FoundationNetworking on Linux cannot be given a trust
/// root or an evaluation callback), so these checks have no URLSession counterpart to run here.
@Suite("Host identity: subjectAltName, IPv6 and pins per port")
struct HostIdentityTests {
    static let otherPin = TLSPin.publicKeyPinText(spkiDER: try! TestCertificates.generate(commonName: "Other").leafSPKIDER)
    static let loopbackV6: [UInt8] = Array(repeating: 0, count: 15) + [1]

    /// Runs `body` with a client trusting `certificates`' CA, talking to a TLS server that
    /// presents them, reached as `urlHost`.
    func withServer(
        _ certificates: TestCertificates,
        listeningOn host: String = "127.0.0.1",
        urlHost: String = "localhost",
        http1: Bool = false,
        configure: (inout AsyncHTTPClientTransport.Configuration, _ port: Int) throws -> Void = { _, _ in },
        _ body: (Client, TestServer) async throws -> Void
    ) async throws {
        let server = try await TestServer.start(.tls(certificates), host: host, handler: Routes.standard)
        var configuration = AsyncHTTPClientTransport.Configuration()
        try configuration.trust(pemCertificates: certificates.caPEMBytes)
        if http1 { configuration.httpVersion = .http1Only }
        try configure(&configuration, server.port)
        let transport = AsyncHTTPClientTransport(configuration: configuration)
        let client = Client(configuration: .init(transport: transport, baseURL: URL(string: "https://\(urlHost):\(server.port)")!))
        try await shuttingDown(transport, server) { try await body(client, server) }
    }

    /// RFC 3986 §3.2.2, RFC 5890: a base URL with an internationalised host name goes to its
    /// IDNA (`xn--`) form — what DNS, the TLS server name and the certificate name — and `Host`
    /// carry, whether it is written in Unicode or as punycode. It went out percent-encoded
    /// (`b%C3%BCcher.test`), a name no resolver or certificate holds.
    // AsyncHTTPClient only: the name must reach the loopback server, and `resolvedHosts` is its
    // setting (URLSession has no host override; a DNS lookup of the name is no test's to make).
    @Test(arguments: ["bücher.test", "xn--bcher-kva.test"])
    func anInternationalisedHostGoesOutInItsIDNAForm(_ written: String) async throws {
        let certificates = try TestCertificates.generate(dnsNames: ["xn--bcher-kva.test"], ipv4Addresses: [])
        try await self.withServer(
            certificates, urlHost: written,
            configure: { configuration, _ in
                configuration.resolvedHosts["xn--bcher-kva.test"] = "127.0.0.1"
            }
        ) { client, server in
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
            let hosts = server.requests.flatMap { $0.headers.filter { $0.0.lowercased() == "host" || $0.0 == ":authority" }.map(\.1) }
            #expect(hosts == ["xn--bcher-kva.test:\(server.port)"], "\(hosts)")
        }
    }

    /// A pin and a `resolvedHosts` entry written with the Unicode name hold for the host requests
    /// go to in its IDNA form: pinned to another key, nothing is sent; to the server's, it is
    /// reached. (A pin kept under the Unicode name matched no request, so none was checked.)
    // AsyncHTTPClient only: pins are checked by its TLS stack (URLSession's are Apple's), and
    // `resolvedHosts` is its setting.
    @Test
    func aPinForAUnicodeHostNameHoldsForItsIDNAForm() async throws {
        let certificates = try TestCertificates.generate(dnsNames: ["xn--bcher-kva.test"], ipv4Addresses: [])
        let other = try TestCertificates.generate(commonName: "Other")
        for (pin, reached) in [(other.leafSPKIDER, false), (certificates.leafSPKIDER, true)] {
            try await self.withServer(
                certificates, urlHost: "bücher.test",
                configure: { configuration, _ in
                    configuration.resolvedHosts["Bücher.test"] = "127.0.0.1"
                    configuration.pinning.pin("bücher.test", to: [try .publicKey(TLSPin.publicKeyPinText(spkiDER: pin))])
                }
            ) { client, server in
                if reached {
                    let article = try await client.send(Endpoint<Article>(path: "/json"))
                    #expect(article.id == 1)
                } else {
                    let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
                    #expect(error?.kind == .pinMismatch, "\(error?.message ?? "")")
                    #expect(server.requests.isEmpty)
                }
            }
        }
    }

    /// The reason of a certificate failure comes from a second handshake with the same server:
    /// the one `resolvedHosts` routes the host to, not whatever the name resolves to elsewhere.
    // AsyncHTTPClient only: `resolvedHosts` is its setting (URLSession has no host override).
    @Test
    func theTLSDiagnosisAsksTheAddressTheHostIsRoutedTo() async throws {
        let certificates = try TestCertificates.generate(dnsNames: ["api.courier.test"], ipv4Addresses: [], leafFlaw: .expired)
        try await self.withServer(
            certificates, urlHost: "api.courier.test",
            configure: { configuration, _ in
                configuration.resolvedHosts["api.courier.test"] = "127.0.0.1"
            }
        ) { client, server in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .tls)
            #expect(error?.tlsReason == .expired, "\(error?.message ?? "")")
            #expect(server.requests.isEmpty)
        }
    }

    /// The reason is told for a chain with a critical extension beyond the common ones (a
    /// certificatePolicies extension, as some enterprise PKIs issue): the diagnosis found no path
    /// for it and called an expired leaf `untrustedIssuer`.
    // AsyncHTTPClient only: the diagnosis is its transport's (URLSession's reason is the platform's).
    @Test(arguments: [false, true])
    func anExpiredLeafWithACriticalPolicyExtensionIsReportedExpired(http1: Bool) async throws {
        let certificates = try TestCertificates.generate(dnsNames: ["localhost"], leafFlaw: .expired, criticalPolicies: true)
        try await self.withServer(certificates, http1: http1) { client, server in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .tls)
            #expect(error?.tlsReason == .expired, "\(error?.message ?? "")")
            #expect(server.requests.isEmpty)
        }
    }

    /// RFC 6125 §6.4.4 and RFC 9110 §4.3.4: the identity is checked against subjectAltName; a
    /// Common Name alone does not name the host (the TLS library would accept it).
    // AsyncHTTPClient only: pins and host identity are checked by its TLS stack; URLSession's are the Security framework's (Apple only).
    @Test(arguments: [false, true])
    func aLeafThatNamesTheHostOnlyInItsCommonNameIsRefused(http1: Bool) async throws {
        let certificates = try TestCertificates.generate(dnsNames: ["localhost"], leafFlaw: .noSubjectAlternativeName)
        try await self.withServer(certificates, http1: http1) { client, server in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .tls)
            #expect(error?.tlsReason == .hostnameMismatch)
            #expect(error?.message.contains("subjectAltName") == true)
            #expect(server.requests.isEmpty)
        }
        // The same leaf with the name in a subjectAltName is accepted: the refusal is about the
        // Common Name, not the CA or the handshake.
        try await self.withServer(try TestCertificates.generate(dnsNames: ["localhost"]), http1: http1) { client, _ in
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
    }

    /// RFC 6125 §6.2.1 / RFC 5280 §4.2.1.6: an IP address is matched against iPAddress SANs.
    // AsyncHTTPClient only: pins and host identity are checked by its TLS stack; URLSession's are the Security framework's (Apple only).
    @Test
    func anIPv6HostIsMatchedAgainstItsAddressInTheCertificate() async throws {
        let forV6 = try TestCertificates.generate(dnsNames: [], ipv4Addresses: [], ipv6Addresses: [Self.loopbackV6])
        try await self.withServer(forV6, listeningOn: "::1", urlHost: "[::1]") { client, _ in
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
        // A leaf for 127.0.0.1 only does not prove ::1.
        let forV4 = try TestCertificates.generate(dnsNames: [], ipv4Addresses: [[127, 0, 0, 1]])
        try await self.withServer(forV4, listeningOn: "::1", urlHost: "[::1]") { client, server in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .tls)
            #expect(server.requests.isEmpty)
        }
    }

    // AsyncHTTPClient only: pins and host identity are checked by its TLS stack; URLSession's are the Security framework's (Apple only).
    @Test(arguments: ["[::1]", "::1", "0:0:0:0:0:0:0:1", "[0000::0001]"])
    func aPinOnAnIPv6AddressIsEnforcedWhateverItsSpelling(_ spelling: String) async throws {
        let certificates = try TestCertificates.generate(dnsNames: [], ipv4Addresses: [], ipv6Addresses: [Self.loopbackV6])
        let right = TLSPin.publicKeyPinText(spkiDER: certificates.leafSPKIDER)
        try await self.withServer(
            certificates, listeningOn: "::1", urlHost: "[::1]",
            configure: { configuration, _ in configuration.pinning.pin(spelling, to: [try .publicKey(Self.otherPin)]) }
        ) { client, server in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .pinMismatch)
            #expect(error?.message.contains(right) == true)
            #expect(server.requests.isEmpty)
        }
        try await self.withServer(
            certificates, listeningOn: "::1", urlHost: "[::1]",
            configure: { configuration, _ in configuration.pinning.pin(spelling, to: [try .publicKey(right)]) }
        ) { client, _ in
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
    }

    // AsyncHTTPClient only: pins and host identity are checked by its TLS stack; URLSession's are the Security framework's (Apple only).
    @Test(arguments: [false, true])
    func aPinForAPortAppliesToThatPortOnly(http1: Bool) async throws {
        let certificates = try TestCertificates.generate()
        let right = TLSPin.publicKeyPinText(spkiDER: certificates.leafSPKIDER)
        // A wrong pin for another port: this port is not pinned.
        try await self.withServer(
            certificates, http1: http1,
            configure: { configuration, port in
                configuration.pinning.pin("localhost:\(port == 1 ? 2 : 1)", to: [try .publicKey(Self.otherPin)])
            }
        ) { client, _ in
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
        // A wrong pin for this port fails it.
        try await self.withServer(
            certificates, http1: http1,
            configure: { configuration, port in
                configuration.pinning.pin("localhost:\(port)", to: [try .publicKey(Self.otherPin)])
            }
        ) { client, server in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .pinMismatch)
            #expect(server.requests.isEmpty)
        }
        // A right pin for this port takes the place of a wrong pin for the host on any port.
        try await self.withServer(
            certificates, http1: http1,
            configure: { configuration, port in
                configuration.pinning.pin("localhost", to: [try .publicKey(Self.otherPin)])
                configuration.pinning.pin("LOCALHOST:\(port)", to: [try .publicKey(right)])
            }
        ) { client, _ in
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
    }

    /// The verifier enforces the pins the transport picks for the host: a pin for this host and
    /// port, not also a wildcard pin for its domain.
    // AsyncHTTPClient only: pins and host identity are checked by its TLS stack; URLSession's are the Security framework's (Apple only).
    @Test
    func aPinForTheHostAndPortTakesThePlaceOfAWildcardPin() async throws {
        let certificates = try TestCertificates.generate(dnsNames: ["api.courier.test"])
        let right = TLSPin.publicKeyPinText(spkiDER: certificates.leafSPKIDER)
        try await self.withServer(
            certificates, urlHost: "api.courier.test",
            configure: { configuration, port in
                configuration.resolvedHosts["api.courier.test"] = "127.0.0.1"
                configuration.pinning.pin("*.courier.test", to: [try .publicKey(Self.otherPin)])
                configuration.pinning.pin("api.courier.test:\(port)", to: [try .publicKey(right)])
            }
        ) { client, _ in
            let article = try await client.send(Endpoint<Article>(path: "/json"))
            #expect(article.id == 1)
        }
        // Without the port pin, the wildcard pin applies and fails.
        try await self.withServer(
            certificates, urlHost: "api.courier.test",
            configure: { configuration, _ in
                configuration.resolvedHosts["api.courier.test"] = "127.0.0.1"
                configuration.pinning.pin("*.courier.test", to: [try .publicKey(Self.otherPin)])
            }
        ) { client, server in
            let error = await expectCourierError { _ = try await client.send(Endpoint<Article>(path: "/json")) }
            #expect(error?.kind == .pinMismatch)
            #expect(server.requests.isEmpty)
        }
    }

    // Plain values: no transport involved.
    @Test
    func pinKeysAreCanonical() {
        var policy = PinningPolicy()
        policy.pin("[0:0::1]:8443", to: [])
        policy.pin("API.Example.com:443", to: [])
        policy.pin("*.example.org", to: [])
        #expect(Set(policy.pins.keys) == ["[::1]:8443", "api.example.com:443", "*.example.org"])
        #expect(policy.pins(for: "::1", port: 8443) != nil)
        #expect(policy.pins(for: "[::1]", port: 443) == nil)
        #expect(policy.pins(for: "api.example.com", port: 443) != nil)
        #expect(policy.pins(for: "api.example.com", port: 8443) == nil)
        #expect(policy.pins(for: "a.example.org", port: 1) != nil)
        #expect(policy.pins(for: "a.b.example.org", port: 1) == nil)
        // RFC 1034 §3.1: a trailing dot writes the same host as an absolute name.
        #expect(policy.pins(for: "api.example.com.", port: 443) != nil)
        #expect(policy.pins(for: "API.EXAMPLE.COM.", port: 443) != nil)
        #expect(policy.pins(for: "a.example.org.", port: 1) != nil)
        policy.pin("pinned.example.net.", to: [])
        #expect(policy.pins(for: "pinned.example.net") != nil)
        #expect(policy.pins(for: ".") == nil)
    }

    @Test
    func aPinnedHostWrittenWithATrailingDotIsStillRefusedOverCleartext() async throws {
        // `http://localhost./` is the pinned host `localhost`: it must never go unchecked. (Was
        // sent in clear text: the pin was looked up under `localhost.`.)
        var configuration = AsyncHTTPClientTransport.Configuration()
        configuration.pinning.pin("localhost", to: [try .publicKey(Self.otherPin)])
        let transport = AsyncHTTPClientTransport(configuration: configuration)
        let client = Client(configuration: .init(transport: transport))
        for url in ["http://localhost./x", "http://LOCALHOST.:8080/x"] {
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: url, decoding: .data)) }
            #expect(error?.kind == .invalidRequest, "\(url): \(String(describing: error))")
            #expect(error?.message.contains("must be reached over https") == true, "\(url)")
        }
        try await transport.shutdown()
    }

    @Test
    func aHostPinnedOnPort443IsRefusedOverCleartextWithoutAPort() async throws {
        // `http://localhost/` names no port: the host pinned where it speaks TLS (`localhost:443`)
        // must not be reached in clear text, as URLSessionTransport refuses it. (Was looked up
        // for port 80, found unpinned, and sent.) AsyncHTTPClient only: on Linux
        // `URLSessionTransport(pinning:)` throws, as FoundationNetworking cannot pin.
        var configuration = AsyncHTTPClientTransport.Configuration()
        configuration.pinning.pin("localhost:443", to: [try .publicKey(Self.otherPin)])
        let transport = AsyncHTTPClientTransport(configuration: configuration)
        let client = Client(configuration: .init(transport: transport))
        for url in ["http://localhost/x", "http://localhost:443/x"] {
            let error = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: url, decoding: .data)) }
            #expect(error?.kind == .invalidRequest, "\(url): \(String(describing: error))")
            #expect(error?.message.contains("must be reached over https") == true, "\(url)")
        }
        // Another port written is another origin, not pinned: it is tried (and nothing listens
        // on port 9 here, so it fails to connect rather than being refused as pinned).
        let other = await expectCourierError { _ = try await client.send(Endpoint<Data>(path: "http://localhost:9/x", decoding: .data)) }
        #expect(other?.kind != .invalidRequest, "\(String(describing: other))")
        try await transport.shutdown()
    }
}
