// CourierFuzz: runs one of Courier's fuzz targets.
//
//   CourierFuzz list                          the targets
//   CourierFuzz <target> <file|directory>...  replays inputs through the target (any build)
//   CourierFuzz <target> [libFuzzer options]  fuzzes (a build with COURIER_FUZZING and
//                                             -sanitize=fuzzer; see scripts/fuzz.sh)
import CourierFuzzTargets
import Foundation

#if COURIER_FUZZING
import CLibFuzzer
#endif

enum Selected {
    nonisolated(unsafe) static var target: FuzzTargets.Target?
}

let arguments = CommandLine.arguments
guard arguments.count >= 2, arguments[1] != "list", let target = FuzzTargets.target(named: arguments[1]) else {
    print(FuzzTargets.all.map(\.name).joined(separator: "\n"))
    exit(arguments.count >= 2 && arguments[1] == "list" ? 0 : 2)
}

#if COURIER_FUZZING
Selected.target = target
// libFuzzer sees the program name and its own options, without the target's name.
var driverArguments = [arguments[0]] + arguments.dropFirst(2)
var pointers: [UnsafeMutablePointer<CChar>?] = driverArguments.map { strdup($0) } + [nil]
var count = Int32(driverArguments.count)
let status = pointers.withUnsafeMutableBufferPointer { buffer -> Int32 in
    var base = buffer.baseAddress
    return LLVMFuzzerRunDriver(&count, &base) { data, size in
        let input = data.map { Data(bytes: $0, count: size) } ?? Data()
        Selected.target?.run(input)
        return 0
    }
}
exit(status)
#else
var replayed = 0
for path in arguments.dropFirst(2) {
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
        FileHandle.standardError.write(Data("no such file: \(path)\n".utf8))
        exit(2)
    }
    let files =
        isDirectory.boolValue
        ? ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted().map { path + "/" + $0 }
        : [path]
    for file in files {
        guard let data = FileManager.default.contents(atPath: file) else { continue }
        target.run(data)
        replayed += 1
    }
}
print("\(target.name): \(replayed) inputs replayed, no failure")
#endif
