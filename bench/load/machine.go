package load

import (
	"bufio"
	"os"
	"runtime"
	"strings"
)

// Machine describes where the load ran, so figures are never quoted without it.
type Machine struct {
	NumCPU   int    `json:"nproc"`
	CPUModel string `json:"cpu_model"`
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Go       string `json:"go"`
	Hostname string `json:"hostname,omitempty"`
}

func thisMachine() Machine {
	host, _ := os.Hostname()
	return Machine{
		NumCPU:   runtime.NumCPU(),
		CPUModel: cpuModel(),
		OS:       runtime.GOOS,
		Arch:     runtime.GOARCH,
		Go:       runtime.Version(),
		Hostname: host,
	}
}

// cpuModel is the first "model name" of /proc/cpuinfo ("" where there is none).
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
