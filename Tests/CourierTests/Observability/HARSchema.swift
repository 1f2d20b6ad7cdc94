import Foundation
import Testing

/// A JSON Schema (draft-07 keywords) for the HTTP Archive format, version 1.2.
///
/// Written from the HAR 1.2 specification (http://www.softwareishard.com/blog/har-12-spec/),
/// independently of the recorder it checks. Custom fields (names starting with `_`) are allowed
/// by the specification, so no object sets `additionalProperties`. Where the specification only
/// says "number", sizes and counts are `integer`; `headersSize` and `bodySize` may be `-1`
/// ("not available"), as may the optional timings and page timings ("does not apply").
enum HARSchema {
    /// The schema, as JSON text.
    static let json: String = #"""
        {
          "$schema": "http://json-schema.org/draft-07/schema#",
          "title": "HTTP Archive 1.2",
          "type": "object",
          "required": ["log"],
          "properties": { "log": { "$ref": "#/definitions/log" } },
          "definitions": {
            "log": {
              "type": "object",
              "required": ["version", "creator", "entries"],
              "properties": {
                "version": { "type": "string", "enum": ["1.2"] },
                "creator": { "$ref": "#/definitions/creator" }, "browser": { "$ref": "#/definitions/creator" },
                "pages": { "type": "array", "items": { "$ref": "#/definitions/page" } },
                "entries": { "type": "array", "items": { "$ref": "#/definitions/entry" } }, "comment": { "type": "string" }
              }
            },
            "creator": {
              "type": "object",
              "required": ["name", "version"],
              "properties": { "name": { "type": "string" }, "version": { "type": "string" }, "comment": { "type": "string" } }
            },
            "page": {
              "type": "object",
              "required": ["startedDateTime", "id", "title", "pageTimings"],
              "properties": {
                "startedDateTime": { "type": "string" }, "id": { "type": "string" }, "title": { "type": "string" },
                "pageTimings": {
                  "type": "object",
                  "properties": {
                    "onContentLoad": { "type": "number", "minimum": -1 }, "onLoad": { "type": "number", "minimum": -1 },
                    "comment": { "type": "string" }
                  }
                },
                "comment": { "type": "string" }
              }
            },
            "entry": {
              "type": "object",
              "required": ["startedDateTime", "time", "request", "response", "cache", "timings"],
              "properties": {
                "pageref": { "type": "string" }, "startedDateTime": { "type": "string" }, "time": { "type": "number", "minimum": 0 },
                "request": { "$ref": "#/definitions/request" },
                "response": { "$ref": "#/definitions/response" },
                "cache": { "$ref": "#/definitions/cache" },
                "timings": { "$ref": "#/definitions/timings" },
                "serverIPAddress": { "type": "string" }, "connection": { "type": "string" }, "comment": { "type": "string" }
              }
            },
            "request": {
              "type": "object",
              "required": ["method", "url", "httpVersion", "cookies", "headers", "queryString", "headersSize", "bodySize"],
              "properties": {
                "method": { "type": "string" }, "url": { "type": "string" }, "httpVersion": { "type": "string" },
                "cookies": { "type": "array", "items": { "$ref": "#/definitions/cookie" } },
                "headers": { "type": "array", "items": { "$ref": "#/definitions/pair" } },
                "queryString": { "type": "array", "items": { "$ref": "#/definitions/pair" } },
                "postData": { "$ref": "#/definitions/postData" },
                "headersSize": { "type": "integer", "minimum": -1 }, "bodySize": { "type": "integer", "minimum": -1 },
                "comment": { "type": "string" }
              }
            },
            "response": {
              "type": "object",
              "required": ["status", "statusText", "httpVersion", "cookies", "headers", "content", "redirectURL", "headersSize", "bodySize"],
              "properties": {
                "status": { "type": "integer" }, "statusText": { "type": "string" }, "httpVersion": { "type": "string" },
                "cookies": { "type": "array", "items": { "$ref": "#/definitions/cookie" } },
                "headers": { "type": "array", "items": { "$ref": "#/definitions/pair" } },
                "content": { "$ref": "#/definitions/content" }, "redirectURL": { "type": "string" },
                "headersSize": { "type": "integer", "minimum": -1 }, "bodySize": { "type": "integer", "minimum": -1 },
                "comment": { "type": "string" }
              }
            },
            "cookie": {
              "type": "object",
              "required": ["name", "value"],
              "properties": {
                "name": { "type": "string" }, "value": { "type": "string" }, "path": { "type": "string" },
                "domain": { "type": "string" }, "expires": { "type": "string" },
                "httpOnly": { "type": "boolean" }, "secure": { "type": "boolean" }, "comment": { "type": "string" }
              }
            },
            "pair": {
              "type": "object",
              "required": ["name", "value"],
              "properties": { "name": { "type": "string" }, "value": { "type": "string" }, "comment": { "type": "string" } }
            },
            "postData": {
              "type": "object",
              "required": ["mimeType"],
              "anyOf": [{ "required": ["text"] }, { "required": ["params"] }],
              "properties": {
                "mimeType": { "type": "string" }, "text": { "type": "string" },
                "params": { "type": "array", "items": { "$ref": "#/definitions/param" } }, "comment": { "type": "string" }
              }
            },
            "param": {
              "type": "object",
              "required": ["name"],
              "properties": {
                "name": { "type": "string" }, "value": { "type": "string" }, "fileName": { "type": "string" },
                "contentType": { "type": "string" }, "comment": { "type": "string" }
              }
            },
            "content": {
              "type": "object",
              "required": ["size", "mimeType"],
              "properties": {
                "size": { "type": "integer", "minimum": 0 }, "compression": { "type": "integer" },
                "mimeType": { "type": "string" }, "text": { "type": "string" }, "encoding": { "type": "string" },
                "comment": { "type": "string" }
              }
            },
            "cache": {
              "type": "object",
              "properties": {
                "beforeRequest": { "$ref": "#/definitions/cacheState" }, "afterRequest": { "$ref": "#/definitions/cacheState" },
                "comment": { "type": "string" }
              }
            },
            "cacheState": {
              "type": ["object", "null"],
              "required": ["lastAccess", "eTag", "hitCount"],
              "properties": {
                "expires": { "type": "string" }, "lastAccess": { "type": "string" }, "eTag": { "type": "string" },
                "hitCount": { "type": "integer", "minimum": 0 }, "comment": { "type": "string" }
              }
            },
            "timings": {
              "type": "object",
              "required": ["send", "wait", "receive"],
              "properties": {
                "blocked": { "type": "number", "minimum": -1 }, "dns": { "type": "number", "minimum": -1 },
                "connect": { "type": "number", "minimum": -1 }, "ssl": { "type": "number", "minimum": -1 },
                "send": { "type": "number", "minimum": 0 }, "wait": { "type": "number", "minimum": 0 },
                "receive": { "type": "number", "minimum": 0 }, "comment": { "type": "string" }
              }
            }
          }
        }
        """#

    /// Parses `data` as JSON and checks it against ``json``; returns the violations, empty when valid.
    ///
    /// Throws only when `data` (or the schema) is not JSON at all.
    static func validate(har data: Data) throws -> [String] {
        let schema = try JSONSerialization.jsonObject(with: Data(json.utf8))
        let document = try JSONSerialization.jsonObject(with: data, options: .fragmentsAllowed)
        return JSONSchemaValidator(schema: schema).validate(document)
    }
}

/// A validator for the subset of JSON Schema draft-07 that ``HARSchema`` uses.
///
/// Supported keywords: `type` (a name or a list of names), `required`, `properties`, `items`
/// (a single schema), `enum`, `minimum`, `anyOf` and `$ref` (to `#/definitions/NAME` in the root
/// schema; as in draft-07, a `$ref` replaces its sibling keywords). `$schema`, `$id`, `title`
/// and `description` are ignored; any other keyword is reported as a violation rather than
/// silently skipped. Values are those `JSONSerialization` produces (or the equivalent Swift
/// values); booleans are told apart from numbers on both Apple platforms and Linux.
struct JSONSchemaValidator {
    /// The root schema, as parsed by `JSONSerialization`.
    let schema: Any

    /// The JSON kinds a `type` keyword names (`integer` is a number with no fractional part).
    private enum Kind: String {
        case object, array, string, number, boolean, null
    }

    private static let supported: Set<String> = [
        "type", "required", "properties", "items", "enum", "minimum", "anyOf", "$ref", "definitions",
    ]
    private static let annotations: Set<String> = ["$schema", "$id", "title", "description"]

    /// Checks `instance` against the schema; each violation reads `"<pointer>: <problem>"`.
    func validate(_ instance: Any) -> [String] {
        var violations: [String] = []
        check(instance, against: schema, at: "", into: &violations)
        return violations
    }

    private func check(_ value: Any, against schema: Any, at path: String, into violations: inout [String]) {
        let here = path.isEmpty ? "/" : path
        if Self.kind(of: schema) == .boolean {
            if (schema as? Bool) != true { violations.append("\(here): no value is allowed here") }
            return
        }
        guard let schema = schema as? [String: Any] else {
            violations.append("\(here): the schema here is not an object")
            return
        }
        for keyword in schema.keys.sorted() where !Self.supported.contains(keyword) && !Self.annotations.contains(keyword) {
            violations.append("\(here): unsupported schema keyword \"\(keyword)\"")
        }
        if let reference = schema["$ref"] {
            guard let target = resolve(reference) else {
                violations.append("\(here): unresolvable $ref \(Self.describe(reference))")
                return
            }
            check(value, against: target, at: path, into: &violations)
            return
        }
        let kind = Self.kind(of: value)
        if let type = schema["type"] {
            let names = (type as? [String]) ?? (type as? String).map { [$0] } ?? []
            if !names.contains(where: { Self.value(value, of: kind, is: $0) }) {
                violations.append("\(here): expected \(names.joined(separator: " or ")), found \(Self.describe(value))")
                return
            }
        }
        if let allowed = schema["enum"] as? [Any], !allowed.contains(where: { Self.equal($0, value) }) {
            violations.append("\(here): \(Self.describe(value)) is not one of [\(allowed.map(Self.describe).joined(separator: ", "))]")
        }
        if let bound = schema["minimum"], let minimum = Self.number(bound), let number = Self.number(value), number < minimum {
            violations.append("\(here): \(Self.format(number)) is less than the minimum \(Self.format(minimum))")
        }
        if let object = value as? [String: Any], kind == .object {
            for name in (schema["required"] as? [String]) ?? [] where object[name] == nil {
                violations.append("\(here): missing required property \"\(name)\"")
            }
            let properties = (schema["properties"] as? [String: Any]) ?? [:]
            for name in properties.keys.sorted() {
                if let child = object[name], let childSchema = properties[name] {
                    check(child, against: childSchema, at: path + "/" + Self.escape(name), into: &violations)
                }
            }
        }
        if let array = value as? [Any], kind == .array, let items = schema["items"] {
            for (index, element) in array.enumerated() {
                check(element, against: items, at: "\(path)/\(index)", into: &violations)
            }
        }
        if let alternatives = schema["anyOf"] as? [Any] {
            var failures: [String] = []
            for (index, alternative) in alternatives.enumerated() {
                var nested: [String] = []
                check(value, against: alternative, at: path, into: &nested)
                if nested.isEmpty {
                    failures = []
                    break
                }
                failures.append("alternative \(index + 1): " + nested.joined(separator: "; "))
            }
            if !failures.isEmpty {
                violations.append("\(here): matches none of anyOf (\(failures.joined(separator: " | ")))")
            }
        }
    }

    /// The schema a `$ref` of the form `#/definitions/NAME` points at in the root schema.
    private func resolve(_ reference: Any) -> Any? {
        guard let reference = reference as? String, reference.hasPrefix("#/definitions/") else { return nil }
        let name = String(reference.dropFirst("#/definitions/".count))
        return ((schema as? [String: Any])?["definitions"] as? [String: Any])?[name]
    }

    /// The JSON kind of a value, or `nil` for something JSON cannot hold.
    private static func kind(of value: Any) -> Kind? {
        if value is NSNull { return .null }
        if value is String { return .string }
        if value is [String: Any] { return .object }
        if value is [Any] { return .array }
        if type(of: value) == Bool.self { return .boolean }
        if type(of: value) is any BinaryInteger.Type || type(of: value) is any BinaryFloatingPoint.Type { return .number }
        // JSONSerialization gives NSNumber for both numbers and booleans; booleans have objCType "c"
        // on Apple platforms and in swift-corelibs-foundation alike. (`value is Bool` also holds for 0 and 1.)
        if let number = value as? NSNumber { return String(cString: number.objCType) == "c" ? .boolean : .number }
        return nil
    }

    /// The numeric value of a JSON number (never of a boolean).
    private static func number(_ value: Any) -> Double? {
        guard kind(of: value) == .number else { return nil }
        if type(of: value) is any BinaryInteger.Type, let integer = value as? any BinaryInteger { return Double(integer) }
        if type(of: value) is any BinaryFloatingPoint.Type, let floating = value as? any BinaryFloatingPoint { return Double(floating) }
        return (value as? NSNumber)?.doubleValue
    }

    private static func value(_ value: Any, of kind: Kind?, is name: String) -> Bool {
        if name == "integer" {
            guard let number = number(value) else { return false }
            return number.isFinite && number.rounded(.towardZero) == number
        }
        return kind?.rawValue == name
    }

    /// JSON equality of scalars, as `enum` needs it (an object or array never matches an `enum` member).
    private static func equal(_ lhs: Any, _ rhs: Any) -> Bool {
        let kind = kind(of: lhs)
        guard kind == Self.kind(of: rhs), kind != .object, kind != .array, kind != nil else { return false }
        return kind == .number ? number(lhs) == number(rhs) : describe(lhs) == describe(rhs)
    }

    /// A short description of a value for messages: strings quoted, numbers and booleans as written.
    private static func describe(_ value: Any) -> String {
        switch kind(of: value) {
        case .string: return "\"\(value as? String ?? "")\""
        case .number: return number(value).map(format) ?? "a number"
        case .boolean: return (value as? Bool) == true ? "true" : "false"
        case .null: return "null"
        case .object: return "an object"
        case .array: return "an array"
        case nil: return "a non-JSON value of type \(type(of: value))"
        }
    }

    private static func format(_ number: Double) -> String {
        if number.isFinite, number.rounded(.towardZero) == number, abs(number) < 1e15 { return String(Int64(number)) }
        return String(number)
    }

    /// Escapes a property name as a JSON Pointer (RFC 6901) reference token.
    private static func escape(_ name: String) -> String {
        name.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
    }
}

/// The schema check itself: a minimal valid document passes, and a wrong type anywhere is named.
@Suite("The HAR 1.2 schema check")
struct HARSchemaTests {
    @Test
    func aMinimalDocumentPassesAndAWrongTypeIsNamedByItsPath() throws {
        let valid = #"{"log":{"version":"1.2","creator":{"name":"x","version":"1"},"entries":[]}}"#
        #expect(try HARSchema.validate(har: Data(valid.utf8)) == [])
        let wrong = #"{"log":{"version":"1.2","creator":{"name":"x","version":1},"entries":[]}}"#
        let violations = try HARSchema.validate(har: Data(wrong.utf8))
        #expect(violations.contains { $0.contains("/log/creator/version") })
    }
}
