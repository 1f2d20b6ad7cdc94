import Courier
import Foundation

extension RequestCommand {
    /// `-o FILE`: downloads to the file, with progress on standard error.
    func download(client: Client, endpoint: Endpoint<Data>, to output: String) async -> Int32 {
        let file = URL(fileURLWithPath: output).standardizedFileURL
        let destination = DownloadDestination(
            directory: file.deletingLastPathComponent(), fileName: file.lastPathComponent, overwrite: self.force)
        var accepting = endpoint
        accepting.acceptedStatuses = 200..<300
        let transfer = client.download(accepting, to: destination, resume: self.continueDownload)
        let printer = Task { await ProgressPrinter(label: file.lastPathComponent).show(transfer.progress) }
        do {
            let result = try await transfer.value
            await printer.value
            let resumed = result.resumedFrom > 0 ? " (resumed at \(result.resumedFrom))" : ""
            Output.standardError("saved \(result.byteCount) bytes to \(result.url.path)\(resumed)\n")
            return 0
        } catch let error as CourierError {
            await printer.value
            let hint =
                error.kind == .transport || error.kind == .cancelled || error.kind == .timeout
                ? "; run again with --continue to resume" : ""
            Output.standardError("courier: \(error.description)\(hint)\n")
            return Self.exitCode(for: error)
        } catch {
            await printer.value
            Output.standardError("courier: \(error)\n")
            return 1
        }
    }
}

/// Shows transfer progress on standard error: a bar redrawn in place on a terminal, plain lines
/// (at most one per 10%) otherwise.
struct ProgressPrinter {
    let label: String

    func show(_ progress: AsyncStream<TransferProgress>) async {
        let terminal = isatty(STDERR_FILENO) != 0
        var lastDecile = -1
        var lastDraw = ContinuousClock.now - .seconds(1)
        var latest: TransferProgress?
        for await update in progress {
            latest = update
            if terminal {
                if ContinuousClock.now - lastDraw >= .milliseconds(100) {
                    lastDraw = .now
                    Output.standardError("\r\(Self.bar(update)) \(self.label)")
                }
            } else if let fraction = update.fraction {
                let decile = Int(fraction * 10)
                if decile > lastDecile {
                    lastDecile = decile
                    Output.standardError(
                        "\(self.label): \(Int(fraction * 100))% (\(update.completedBytes)/\(update.expectedBytes ?? 0) bytes)\n")
                }
            }
        }
        if terminal, let latest {
            Output.standardError("\r\(Self.bar(latest)) \(self.label)\n")
        } else if !terminal, let latest, latest.fraction == nil {
            Output.standardError("\(self.label): \(latest.completedBytes) bytes\n")
        }
    }

    static func bar(_ progress: TransferProgress) -> String {
        guard let fraction = progress.fraction else { return "\(progress.completedBytes) bytes" }
        let width = 30
        let filled = Int(fraction * Double(width))
        return "[" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled) + "] "
            + String(format: "%3d%%", Int(fraction * 100))
    }
}
