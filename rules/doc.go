// Package rules loads rate-limit rules from YAML files, validates them, and
// keeps them current while a server runs.
//
// A Set is an immutable list of named rules, each with a Match (method, path
// pattern, header), a KeySpec (what hits are counted by: ip, header:NAME,
// route, or a combination like "ip,route") and a ringlimit.Rule. Parse and
// Load build a Set from YAML (the format is documented on Parse) and report
// every problem with its line number, as *Error values wrapping ErrInvalid;
// a valid rule that is probably a mistake (an override any client can claim
// by sending a header) is listed in Set.Warnings instead, and a Watcher logs
// it.
//
// A Watcher rereads its file every interval and swaps a changed, valid file's
// Set in atomically once the file has stayed unchanged for WatchConfig.Settle
// (500 ms), so a file caught half written is never loaded; a broken file
// keeps the last good Set in force and is logged and counted. Replace rule
// files by atomic rename; symbolic link swaps (Kubernetes ConfigMaps) are
// followed. Its goroutine runs only inside Run (or Watch), and
// stops when the context given to it is done.
//
// Both *Set and *Watcher have a Current() *Set method, which is what
// httplimit.WithRules takes.
package rules
