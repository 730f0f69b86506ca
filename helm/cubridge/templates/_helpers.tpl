{{/*
Names. Kubernetes names are DNS labels: at most 63 characters, so everything is cut to fit the
longest suffix the chart appends: "-worker-<pool>" with a pool name of at most 18 characters
(values.schema.json holds pools to that), 26 characters.
*/}}
{{- define "cubridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 37 | trimSuffix "-" -}}
{{- end -}}

{{- define "cubridge.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 37 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 37 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 37 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "cubridge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every resource carries. */}}
{{- define "cubridge.labels" -}}
helm.sh/chart: {{ include "cubridge.chart" . }}
app.kubernetes.io/name: {{ include "cubridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: cubridge
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Selector labels: only what never changes over a release's life, since a Deployment's selector
is immutable. Call with (dict "ctx" $ "component" "coordinator").
*/}}
{{- define "cubridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "cubridge.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Full labels of one component: the common ones plus its selector labels. */}}
{{- define "cubridge.componentLabels" -}}
{{ include "cubridge.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "cubridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "cubridge.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* image: (dict "image" .Values.x.image "ctx" $) -> repository:tag, tag defaulting to appVersion. */}}
{{- define "cubridge.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{/* Resource names shared by several templates. */}}
{{- define "cubridge.coordinator.fullname" -}}
{{- printf "%s-coordinator" (include "cubridge.fullname" .) -}}
{{- end -}}
{{- define "cubridge.redis.fullname" -}}
{{- printf "%s-redis" (include "cubridge.fullname" .) -}}
{{- end -}}
{{- define "cubridge.workers.fullname" -}}
{{- printf "%s-workers" (include "cubridge.fullname" .) -}}
{{- end -}}

{{/* Where workers dial the coordinator: the Service's name, which the TLS certificate must carry. */}}
{{- define "cubridge.coordinator.address" -}}
{{- printf "%s:%d" (include "cubridge.coordinator.fullname" .) (int .Values.coordinator.service.grpcPort) -}}
{{- end -}}

{{/* Secrets: the chart's own unless an existing one is named. */}}
{{- define "cubridge.clientTokens.secretName" -}}
{{- default (printf "%s-client-tokens" (include "cubridge.fullname" .)) .Values.auth.clientTokens.existingSecret -}}
{{- end -}}
{{- define "cubridge.workerToken.secretName" -}}
{{- default (printf "%s-worker-token" (include "cubridge.fullname" .)) .Values.auth.workerToken.existingSecret -}}
{{- end -}}
{{- define "cubridge.workerToken.tokenKey" -}}
{{- if .Values.auth.workerToken.existingSecret -}}{{ .Values.auth.workerToken.existingSecretTokenKey }}{{- else -}}token{{- end -}}
{{- end -}}
{{- define "cubridge.workerToken.acceptedKey" -}}
{{- if .Values.auth.workerToken.existingSecret -}}{{ .Values.auth.workerToken.existingSecretAcceptedKey }}{{- else -}}tokens{{- end -}}
{{- end -}}
{{- define "cubridge.clientTokens.key" -}}
{{- if .Values.auth.clientTokens.existingSecret -}}{{ .Values.auth.clientTokens.existingSecretKey }}{{- else -}}tokens{{- end -}}
{{- end -}}
{{- define "cubridge.redis.secretName" -}}
{{- default (printf "%s-redis" (include "cubridge.fullname" .)) .Values.redis.auth.existingSecret -}}
{{- end -}}
{{- define "cubridge.redis.secretKey" -}}
{{- if .Values.redis.auth.existingSecret -}}{{ .Values.redis.auth.existingSecretKey }}{{- else -}}redis-password{{- end -}}
{{- end -}}
{{- define "cubridge.redisUrl.secretName" -}}
{{- default (printf "%s-redis-url" (include "cubridge.fullname" .)) .Values.redis.external.existingSecret -}}
{{- end -}}
{{- define "cubridge.redisUrl.secretKey" -}}
{{- if .Values.redis.external.existingSecret -}}{{ .Values.redis.external.existingSecretKey }}{{- else -}}redis-url{{- end -}}
{{- end -}}
{{- define "cubridge.llm.secretName" -}}
{{- default (printf "%s-llm" (include "cubridge.fullname" .)) .Values.llm.existingSecret -}}
{{- end -}}
{{- define "cubridge.llm.secretKey" -}}
{{- if .Values.llm.existingSecret -}}{{ .Values.llm.existingSecretKey }}{{- else -}}api-key{{- end -}}
{{- end -}}
{{- define "cubridge.tls.secretName" -}}
{{- default (printf "%s-tls" (include "cubridge.fullname" .)) .Values.tls.existingSecret -}}
{{- end -}}

{{/*
A secret value that survives upgrades: the given one, else the one already in the cluster, else
a fresh random one. (dict "ctx" $ "name" secretName "key" key "given" value). `helm template`
cannot look the cluster up, so there a fresh value is rendered every time.
*/}}
{{- define "cubridge.persistentSecretValue" -}}
{{- if .given -}}
{{- .given -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" .ctx.Release.Namespace .name -}}
{{- if and $existing (index ($existing.data | default dict) .key) -}}
{{- index $existing.data .key | b64dec | trim -}}
{{- else -}}
{{- randAlphaNum 48 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The LLM proposer's settings go to worker pools only; the coordinator never calls the model.
"cubridge.llm.pool" (dict "ctx" $ "pool" $pool) renders "true" when the pool gets them: llm is
enabled and llm.pools is empty (every pool) or names it.
*/}}
{{- define "cubridge.llm.pool" -}}
{{- $llm := .ctx.Values.llm -}}
{{- if and $llm.enabled (or (not $llm.pools) (has .pool.name $llm.pools)) -}}true{{- end -}}
{{- end -}}

{{/* "true" when a key is given at all; local servers need none, and then nothing is rendered. */}}
{{- define "cubridge.llm.hasKey" -}}
{{- if or .Values.llm.existingSecret .Values.llm.apiKey -}}true{{- end -}}
{{- end -}}

{{/*
A worker's --llm-* flags, as args list items. The key is not among them: a flag would show in
`ps`, so it arrives as CUBRIDGE_LLM_API_KEY ("cubridge.llm.env").
*/}}
{{- define "cubridge.llm.args" -}}
{{- $llm := .Values.llm -}}
- --llm-endpoint
- {{ $llm.endpoint | quote }}
- --llm-model
- {{ $llm.model | quote }}
- --llm-max-rounds
- {{ include "cubridge.number" $llm.maxRounds | quote }}
- --llm-max-tokens
- {{ include "cubridge.number" $llm.maxTokens | quote }}
- --llm-max-cost-usd
- {{ include "cubridge.number" $llm.maxCostUsd | quote }}
- --llm-usd-per-million-prompt
- {{ include "cubridge.number" $llm.usdPerMillionPrompt | quote }}
- --llm-usd-per-million-completion
- {{ include "cubridge.number" $llm.usdPerMillionCompletion | quote }}
- --llm-timeout
- {{ include "cubridge.number" $llm.timeoutSeconds | quote }}
- --llm-retries
- {{ include "cubridge.number" $llm.retries | quote }}
{{- end -}}

{{/* The API key of a worker that gets the LLM settings, when one is given. */}}
{{- define "cubridge.llm.env" -}}
- name: CUBRIDGE_LLM_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "cubridge.llm.secretName" . }}
      key: {{ include "cubridge.llm.secretKey" . }}
{{- end -}}

{{/* Checks that JSON Schema cannot express. */}}
{{- define "cubridge.validate" -}}
{{- $names := list -}}
{{- range .Values.workers.pools -}}
{{- if has .name $names -}}
{{- fail (printf "workers.pools: the pool name %q is used twice; names must be unique" .name) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- if and (eq .kind "DaemonSet") (hasKey . "replicas") -}}
{{- fail (printf "workers.pools %q: replicas does not apply to a DaemonSet (one worker on every matching node); remove it or use kind: Deployment" .name) -}}
{{- end -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) (not .Values.redis.external.url) (not .Values.redis.external.existingSecret) -}}
{{- fail "redis.enabled is false: set redis.external.url (or redis.external.existingSecret) to the Redis the coordinator should use" -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) (not (and .Values.tls.cert .Values.tls.key .Values.tls.ca)) -}}
{{- fail "tls.enabled: set tls.existingSecret, or all of tls.cert, tls.key and tls.ca" -}}
{{- end -}}
{{- /* values.schema.json says the same; this holds with --skip-schema-validation too. */ -}}
{{- if and .Values.llm.enabled (not .Values.llm.endpoint) -}}
{{- fail "llm.enabled: set llm.endpoint to the model server's chat-completions base URL, e.g. http://vllm.llm.svc.cluster.local:8000/v1" -}}
{{- end -}}
{{- if and .Values.llm.enabled (not .Values.llm.model) -}}
{{- fail "llm.enabled: set llm.model to the name of a model the server at llm.endpoint serves" -}}
{{- end -}}
{{- range .Values.llm.pools -}}
{{- if not (has . $names) -}}
{{- fail (printf "llm.pools names %q, which is not a pool of workers.pools (pools: %s); set llm.pools to names from workers.pools[].name, or to [] for every pool" . (join ", " $names | default "none")) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A number as a flag value. Values arrive as float64, and Go prints 1048576.0 as 1.048576e+06,
which the binaries' flag parser rejects: whole numbers print as integers, the rest as they are.
*/}}
{{- define "cubridge.number" -}}
{{- if eq (float64 .) (float64 (int64 .)) -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- end -}}
