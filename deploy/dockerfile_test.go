package deploy

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDockerfileBuildsAStaticBinary runs the Dockerfile's build line as it
// stands (no Docker daemon needed) and checks what the distroless/static
// base requires: a binary that loads no shared library, not even libc.
func TestDockerfileBuildsAStaticBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds pdlb")
	}
	dockerfile, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .*) -o /out/pdlb (\./cmd/pdlb)$`).FindSubmatch(dockerfile)
	if m == nil {
		t.Fatal("the Dockerfile has no `RUN CGO_ENABLED=0 go build … -o /out/pdlb ./cmd/pdlb` line")
	}
	if !strings.Contains(string(dockerfile), "\nUSER 65532:65532\n") {
		t.Error("the image does not switch to a non-root user")
	}
	out := filepath.Join(t.TempDir(), "pdlb")
	line := strings.ReplaceAll(string(m[1]), "${VERSION}", "test") + " -o " + out + " " + string(m[2])
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader (PT_INTERP): it would not start on distroless/static")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v (%v)", libs, err)
	}
	if v, err := exec.Command(out, "version").Output(); err != nil || strings.TrimSpace(string(v)) != "pdlb test" {
		t.Errorf("pdlb version: %q, %v; want the VERSION build argument", v, err)
	}
}
