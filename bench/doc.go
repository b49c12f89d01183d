// Package bench holds the go test -bench comparisons of package net and
// netpoll. Benchmark names are key=value paths (impl=netpoll/mode=et/...)
// so that benchstat -col /impl,/mode compares them directly.
//
//	go test -run '^$' -bench . -count 6 ./bench/ | tee new.txt
//	go tool benchstat -col /impl,/mode,/wait new.txt
//
// BenchmarkStatsAccept asks whether a metrics scrape stalls Accept: with
// 18,000 idle connections held, accepts per second with and without a
// Group.Stats call every millisecond, in alternating 50 ms windows of one
// run, so that each -count repetition is a paired round. After the rounds
// it prints their stats/off ratio with its 95% interval (issue 32's
// target: the lower bound at least 0.95); benchstat shows the rest. Run it
// alone, from the repository's root:
//
//	go test ./bench -run '^$' -bench StatsAccept -count 8 | tee out.txt
//	go tool benchstat out.txt
package bench
