#!/usr/bin/env bash
# sshd-up.sh - a private sshd on 127.0.0.1:2222 for the SSH target tests: key-only root login, no
# systemd, its own pinned known_hosts. Idempotent: keeps existing keys; restarts a running sshd
# only when its config changed.
set -euo pipefail
D=${SSHD_DIR:-/tmp/cairn-sshd}
PORT=${SSHD_PORT:-2222}
command -v /usr/sbin/sshd >/dev/null || {
  apt-get update -q
  apt-get install -y -q --no-install-recommends openssh-server openssh-client
}
install -d -m 0755 "$D"                           # 0755: sshd reads authorized_keys as the target user
install -d -m 0755 /run/sshd                      # privilege-separation dir, must exist
[ -f "$D/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C ci-host -f "$D/host_ed25519"
[ -f "$D/id_ed25519" ]   || ssh-keygen -q -t ed25519 -N '' -C ci-user -f "$D/id_ed25519"
cp "$D/id_ed25519.pub" "$D/authorized_keys"; chmod 0644 "$D/authorized_keys"

# With CAIRN_TEST_VENV set, remote commands find the test venv's snakemake and python3 first.
# SHLVL=1 makes bash skip ~/.bashrc, which Debian's bash otherwise sources for every ssh command:
# root's bashrc here puts pyenv shims ahead of the venv and costs ~190 ms a command.
SETENV=${CAIRN_TEST_VENV:+"SetEnv PATH=$CAIRN_TEST_VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SHLVL=1"}
# A second login, `cairnlite`, whose PATH holds python3 and nothing else (no sbatch, squeue, ...):
# the Slurm readiness tests plan on it to see a missing program refused. Same key as root (the
# AuthorizedKeysFile above is shared). Its python3 is one a non-root user can run: the venv's
# links into root's pyenv, behind /root's mode 0700, so the system's /usr/bin/python3.
LITE=
if [ -n "${CAIRN_TEST_VENV:-}" ] && [ -x /usr/bin/python3 ]; then
  id cairnlite >/dev/null 2>&1 || useradd -m -s /bin/sh cairnlite
  usermod -p '*' cairnlite                        # no password, but not locked: sshd refuses locked accounts
  install -d -m 0755 "$D/lite-bin"
  ln -sfn /usr/bin/python3 "$D/lite-bin/python3"
  # Match blocks must come last in sshd_config.
  LITE="Match User cairnlite
  SetEnv PATH=$D/lite-bin"
fi
OLD=$(cat "$D/sshd_config" 2>/dev/null || true)
cat > "$D/sshd_config" <<EOF
${SETENV}
Port $PORT
ListenAddress 127.0.0.1
HostKey $D/host_ed25519
PidFile $D/sshd.pid
AuthorizedKeysFile $D/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 100:30:200
MaxSessions 100
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
${LITE}
EOF

# client side: known_hosts pinned to our host key; use with  ssh -F $D/ssh_config ci
echo "[127.0.0.1]:$PORT $(cut -d' ' -f1,2 "$D/host_ed25519.pub")" > "$D/known_hosts"
cat > "$D/ssh_config" <<EOF
Host ci
  HostName 127.0.0.1
  Port $PORT
  User root
  IdentityFile $D/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile $D/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  ControlMaster auto
  ControlPath $D/cm-%C
  ControlPersist 60
  # curve25519 alone: ~110 ms faster handshake than the sntrup761 default
  KexAlgorithms curve25519-sha256
EOF

/usr/sbin/sshd -t -f "$D/sshd_config"             # config check
if [ "$OLD" != "$(cat "$D/sshd_config")" ] && [ -s "$D/sshd.pid" ] && kill "$(cat "$D/sshd.pid")" 2>/dev/null; then
  for i in $(seq 50); do kill -0 "$(cat "$D/sshd.pid" 2>/dev/null)" 2>/dev/null || break; sleep 0.1; done
  ssh -F "$D/ssh_config" -O exit ci 2>/dev/null || true   # a master would keep the old environment
fi
if ! { [ -s "$D/sshd.pid" ] && kill -0 "$(cat "$D/sshd.pid")" 2>/dev/null; }; then
  /usr/sbin/sshd -f "$D/sshd_config" -E "$D/sshd.log"   # daemonizes, writes $D/sshd.pid
fi
for i in $(seq 50); do
  ssh -F "$D/ssh_config" -o ControlMaster=no ci true 2>/dev/null && break; sleep 0.1
done
ssh -F "$D/ssh_config" -o ControlMaster=no ci 'echo sshd ok: $(uname -n)'
