package main

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/edgepoll/edgepoll/internal/loadproto"
)

// The TechEmpower plaintext and JSON tests: each response carries Server
// and Date (net/http sets Date); the JSON is encoded for every request.
const (
	serverName = "httpserver"
	helloWorld = "Hello, World!"
)

type message struct {
	Message string `json:"message"`
}

func newHandler(files string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /plaintext", plaintext)
	mux.HandleFunc("GET /json", jsonHello)
	// On the served listener, not -debug's: the idle experiment
	// (cmd/loadgen -idle -proto http) asks over one of the connections it
	// measures, as it sends echoserver a Memstats request.
	mux.HandleFunc("GET "+loadproto.MemstatsPath, memstatsJSON)
	if files != "" {
		mux.Handle("GET /files/", http.StripPrefix("/files/", http.FileServer(http.Dir(files))))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", serverName)
		mux.ServeHTTP(w, r)
	})
}

func plaintext(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, helloWorld)
}

func jsonHello(w http.ResponseWriter, _ *http.Request) {
	b, err := json.Marshal(message{Message: helloWorld})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}
