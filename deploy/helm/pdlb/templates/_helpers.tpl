{{/* Names and labels shared by every object of the chart. */}}

{{- define "pdlb.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "pdlb.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pdlb.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pdlb.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "pdlb.labels" -}}
{{ include "pdlb.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "pdlb.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "pdlb.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
pdlb.config is the config.yaml pdlb reads: the user's `config` with the
listeners, the shutdown grace and the discovery the pod spec and RBAC
depend on. A replicated embedded registry without etcd would split
registrations between replicas, so it fails the render instead of failing
requests.
*/}}
{{- define "pdlb.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $mode := dig "bootstrap" "mode" "embedded" $cfg -}}
{{- $etcd := dig "cluster" "etcd" "endpoints" list $cfg -}}
{{- if and (gt (int .Values.replicaCount) 1) (eq (toString $mode) "embedded") (empty $etcd) -}}
{{- fail "replicaCount > 1 with the embedded registry needs config.cluster.etcd.endpoints (the replicas share it through etcd), or config.bootstrap.mode external or off: else the registry lives in one replica, and a decode could ask another" -}}
{{- end -}}
{{- if and .Values.upstreamAuthSecret.name (empty .Values.adminApiKeySecret.name) -}}
{{- fail "upstreamAuthSecret needs adminApiKeySecret: the admin API listens on the pod network, and anyone who reaches it could add a worker that pdlb then sends the engines' keys" -}}
{{- end -}}
{{- $d := .Values.discovery -}}
{{- if $d.enabled -}}
{{- if and (empty $d.prefillSelector) (empty $d.decodeSelector) -}}
{{- fail "discovery.enabled needs discovery.prefillSelector, discovery.decodeSelector or both" -}}
{{- end -}}
{{- $kube := default dict (dig "discovery" "kubernetes" dict $cfg) -}}
{{- $_ := set $kube "enabled" true -}}
{{- $_ := set $kube "namespace" (default .Release.Namespace $d.namespace) -}}
{{- $_ := set $kube "prefill_selector" (toString $d.prefillSelector) -}}
{{- $_ := set $kube "decode_selector" (toString $d.decodeSelector) -}}
{{- $_ := set $cfg "discovery" (dict "kubernetes" $kube) -}}
{{- end -}}
{{- $shared := not (empty (dig "cluster" "etcd" "endpoints" list $cfg)) -}}
{{- if and (not $shared) (or (and (empty $cfg.prefill) (not (and $d.enabled $d.prefillSelector))) (and (empty $cfg.decode) (not (and $d.enabled $d.decodeSelector)))) -}}
{{- fail "config.prefill and config.decode must each list at least one engine, or discovery find them (discovery.prefillSelector, discovery.decodeSelector), or config.cluster.etcd hold the workers added through the admin API: else no replica would ever be ready" -}}
{{- end -}}
{{- $server := merge (dict "host" "0.0.0.0" "port" (int .Values.service.port) "shutdown_grace" (printf "%ds" (int .Values.shutdownGraceSeconds))) (default dict $cfg.server) -}}
{{- $_ := set $server "host" "0.0.0.0" -}}
{{- $_ := set $server "port" (int .Values.service.port) -}}
{{- $_ := set $server "shutdown_grace" (printf "%ds" (int .Values.shutdownGraceSeconds)) -}}
{{- $admin := default dict $cfg.admin -}}
{{- $_ := set $admin "host" "0.0.0.0" -}}
{{- $_ := set $admin "port" (int .Values.service.adminPort) -}}
{{- $_ := set $cfg "server" $server -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- toYaml $cfg -}}
{{- end -}}
