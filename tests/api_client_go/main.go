// A ctxledger api client in Go (standard library only): the turn loop a Go orchestrator runs.
//
//	go run main.go -base http://127.0.0.1:8766 -token "$CTXLEDGER_API_TOKEN" -turns 50
//
// Each turn records the step's tool output (with an Idempotency-Key, sent twice as a client
// whose first answer was lost would, and checks both answers are the same), builds the prompt
// with the rendered Anthropic request, and reports the call's usage; every tenth turn the
// "provider" answers a context-limit error instead, reported as a turn error, which refreshes.
// At the end it prints one JSON line: turns, the last generation, and the generations seen.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

type client struct {
	base  string
	token string
	http  *http.Client
}

type apiError struct {
	Error struct {
		Type    string  `json:"type"`
		Message string  `json:"message"`
		Field   *string `json:"field"`
	} `json:"error"`
}

func (c *client) call(method, path string, body any, key string, out any) ([]byte, error) {
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, c.base+path, reader)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e apiError
		_ = json.Unmarshal(raw, &e)
		return nil, fmt.Errorf("%s %s: %d %s: %s", method, path, resp.StatusCode, e.Error.Type, e.Error.Message)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, fmt.Errorf("%s %s: %v", method, path, err)
		}
	}
	return raw, nil
}

type item struct {
	Content string   `json:"content"`
	Source  string   `json:"source,omitempty"`
	Layer   int      `json:"layer,omitempty"`
	Files   []string `json:"files,omitempty"`
}

type build struct {
	PackID       string `json:"pack_id"`
	Generation   int    `json:"generation"`
	StaticPrefix string `json:"static_prefix"`
	DynamicTail  string `json:"dynamic_tail"`
	Request      struct {
		Model  string            `json:"model"`
		System []json.RawMessage `json:"system"`
	} `json:"request"`
}

type turnError struct {
	Refreshed bool   `json:"refreshed"`
	Build     *build `json:"build"`
}

func run(c *client, agent string, turns int) error {
	reg := map[string]any{"agent_id": agent, "role": "coder", "task": "fix the parser", "budget": 4000}
	if _, err := c.call("POST", "/v1/agents", reg, "register-"+agent, nil); err != nil {
		return err
	}
	first := []item{{Content: "Fix the off-by-one in parser.go", Source: "user_requirement", Layer: 1}}
	if _, err := c.call("POST", "/v1/agents/"+agent+"/items", map[string]any{"items": first}, agent+"-task", nil); err != nil {
		return err
	}
	path := "/v1/agents/" + agent
	generations := map[int]bool{}
	last := 0
	for turn := 1; turn <= turns; turn++ {
		out := fmt.Sprintf("step %d: go test ./parser -> %d failing; %s", turn, turn%3, strings.Repeat("log ", 30))
		body := map[string]any{"item": item{Content: out, Files: []string{"parser.go"}}}
		key := fmt.Sprintf("%s-record-%d", agent, turn)
		a, err := c.call("POST", path+"/items", body, key, nil)
		if err != nil {
			return err
		}
		b, err := c.call("POST", path+"/items", body, key, nil) // the retry after a lost answer
		if err != nil {
			return err
		}
		if !bytes.Equal(a, b) {
			return fmt.Errorf("turn %d: a retry with the same key answered differently", turn)
		}
		var built build
		req := map[string]any{"task": "fix the parser", "provider": "anthropic", "model": "claude-sonnet-4-5"}
		if _, err := c.call("POST", path+"/build", req, fmt.Sprintf("%s-build-%d", agent, turn), &built); err != nil {
			return err
		}
		if built.Request.Model != "claude-sonnet-4-5" || len(built.Request.System) == 0 || built.StaticPrefix == "" {
			return fmt.Errorf("turn %d: the build has no rendered request", turn)
		}
		last = built.Generation
		generations[last] = true
		if turn%10 == 0 {
			limit := map[string]any{"provider": "anthropic", "error": map[string]any{
				"type":  "error",
				"error": map[string]any{"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"},
			}}
			var te turnError
			if _, err := c.call("POST", path+"/turn-errors", limit, fmt.Sprintf("%s-error-%d", agent, turn), &te); err != nil {
				return err
			}
			if !te.Refreshed || te.Build == nil || te.Build.Generation != last+1 {
				return fmt.Errorf("turn %d: the context-limit error did not refresh", turn)
			}
			last = te.Build.Generation
			generations[last] = true
			continue
		}
		usage := map[string]any{"usage": map[string]any{
			"input_tokens": 120, "output_tokens": 40, "cache_read_input_tokens": 300, "cache_creation_input_tokens": 0,
		}}
		if _, err := c.call("POST", path+"/usage", usage, fmt.Sprintf("%s-usage-%d", agent, turn), nil); err != nil {
			return err
		}
	}
	var view struct {
		Generation int `json:"generation"`
	}
	if _, err := c.call("GET", path, nil, "", &view); err != nil {
		return err
	}
	if view.Generation != last {
		return fmt.Errorf("inspect shows generation %d, the loop ended at %d", view.Generation, last)
	}
	summary, _ := json.Marshal(map[string]any{"agent": agent, "turns": turns, "generation": last, "generations_seen": len(generations)})
	fmt.Println(string(summary))
	return nil
}

func main() {
	base := flag.String("base", "http://127.0.0.1:8766", "ctxledger api address")
	token := flag.String("token", os.Getenv("CTXLEDGER_API_TOKEN"), "bearer token")
	agent := flag.String("agent", "go-orchestrator", "agent id")
	turns := flag.Int("turns", 50, "turns to run")
	flag.Parse()
	c := &client{base: strings.TrimRight(*base, "/"), token: *token, http: &http.Client{}}
	if err := run(c, *agent, *turns); err != nil {
		fmt.Fprintln(os.Stderr, "go client:", err)
		os.Exit(1)
	}
}
