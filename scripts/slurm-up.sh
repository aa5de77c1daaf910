#!/usr/bin/env bash
# slurm-up.sh - a single-node Slurm (munge, slurmctld, slurmd) on loopback for the Slurm target
# tests, no systemd, with accounting (slurmdbd over a MariaDB reachable only by its unix socket) so
# that `sacct` works: Snakemake's Slurm executor polls it. State, spool, logs, pid files and the
# database live in $SLURM_DIR; the configs go to /etc/slurm/ because that is where
# sbatch/squeue/scontrol/scancel/sacct/slurmdbd look without SLURM_CONF. Idempotent: starts only
# what is not running, restarts the daemons if their config changed. Stop with
# scripts/slurm-down.sh.
set -euo pipefail
D=${SLURM_DIR:-/tmp/cairn-slurm}
# Slots, not cores: tests submit concurrent jobs that mostly sleep, so more slots than CPUs keeps
# them from queueing behind each other (config_overrides below stops slurmd draining the node).
CPUS=${SLURM_CPUS:-$(( $(nproc) > 8 ? $(nproc) : 8 ))}
MINJOBAGE=${MINJOBAGE:-300}   # seconds a finished job stays visible to `scontrol show job`

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
die() { echo "slurm-up: $1" >&2; tail -n 20 "$2" >&2 || true; exit 1; }

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
   || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null \
   || ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null; then
  apt-get update -q
  apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge \
    slurmdbd mariadb-server
fi

# ---- munge: Slurm's authentication; its socket and key paths are compiled into libmunge ----
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/log/munge /etc/munge
install -d -o munge -g munge -m 0711 /var/lib/munge
[ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_ok; then
  rm -f /run/munge/munged.pid /run/munge/munge.socket.2*   # leftovers of a dead munged block it
  runuser -u munge -- /usr/sbin/munged                     # forks; pid in /run/munge/munged.pid
  for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
  munge_ok || die "munged did not come up" /var/log/munge/munged.log
fi

install -d -m 0755 "$D" "$D/ctld" "$D/spool" /etc/slurm
stop() { alive "$1" || return 0; local p; p=$(cat "$1"); kill "$p"
         for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done; kill -9 "$p"; }

# ---- MariaDB for slurmdbd: our own datadir and socket in $D and no TCP at all. --no-defaults
# keeps /etc/mysql out, so a system MariaDB (which apt may have started) neither clashes nor
# leaks its settings in; slurmdbd finds the socket through MYSQL_UNIX_PORT (read by libmariadb) ----
DB=$D/mysql; DBRUN=$D/mysqld; SOCK=$DBRUN/mysqld.sock
install -d -o mysql -g mysql -m 0755 "$DBRUN"   # mariadbd runs as mysql and makes its socket here
db_ok() { mariadb-admin --no-defaults --socket="$SOCK" ping >/dev/null 2>&1; }
if ! db_ok; then
  if [ ! -d "$DB/mysql" ]; then                     # none yet, or an install-db that died half way
    rm -rf "$DB"
    mariadb-install-db --no-defaults --user=mysql --datadir="$DB" >"$DBRUN/install.log" 2>&1 \
      || die "mariadb-install-db failed" "$DBRUN/install.log"
  fi
  # Its own temporary directory: the caller's TMPDIR may be one the mysql user cannot write.
  setsid -f mariadbd --no-defaults --user=mysql --datadir="$DB" --skip-networking --tmpdir="$DBRUN" \
    --socket="$SOCK" --pid-file="$DBRUN/mysqld.pid" --log-error="$DBRUN/mysqld.err" \
    </dev/null >/dev/null 2>&1                     # does not daemonize by itself
  for _ in $(seq 300); do db_ok && break; sleep 0.1; done
  db_ok || die "mariadbd did not come up" "$DBRUN/mysqld.err"
fi
# root gets in by unix_socket auth (the OS user); slurmdbd gets its own user and database
mariadb --no-defaults --socket="$SOCK" -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost'
  IDENTIFIED BY 'slurmdb'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

# ---- slurmdbd, addressed as 127.0.0.1:6819 (like slurmctld and slurmd it listens on all
# addresses: Slurm 22.05 has no bind option; munge authenticates every message). It forks. ----
DBDCONF=$(cat <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurmdb
StorageLoc=slurm_acct_db
LogFile=$D/slurmdbd.log
PidFile=$D/slurmdbd.pid
EOF
)
if [ "$(cat /etc/slurm/slurmdbd.conf 2>/dev/null)" != "$DBDCONF" ]; then
  stop "$D/slurmdbd.pid"
  (umask 077; printf '%s\n' "$DBDCONF" > /etc/slurm/slurmdbd.conf)
fi
chmod 0600 /etc/slurm/slurmdbd.conf              # slurmdbd refuses a conf others can read
alive "$D/slurmdbd.pid" || MYSQL_UNIX_PORT=$SOCK slurmdbd

# ---- slurm.conf ----
MEM=$(free -m | awk '/^Mem:/{print $2}')
# OverTimeLimit=0 and KillWait=2: a job past its limit is killed at the next time-limit sweep
# (slurmctld runs one every ~30 s) with SIGKILL 2 s after SIGTERM, instead of 30 s after.
# batch_sched_delay/sched_min_interval=0 ask for no delay between scheduling passes; measured, a
# job still usually starts on the next pass, about 1 s after submission (BENCHMARKS.md §7).
CONF=$(cat <<EOF
ClusterName=cairn
SlurmctldHost=localhost
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$D/ctld
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
JobCompType=jobcomp/none
MinJobAge=$MINJOBAGE
OverTimeLimit=0
KillWait=2
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
)
if [ "$(cat /etc/slurm/slurm.conf 2>/dev/null)" != "$CONF" ]; then
  stop "$D/slurmd.pid"; stop "$D/slurmctld.pid"    # running daemons hold the old config
  printf '%s\n' "$CONF" > /etc/slurm/slurm.conf
fi

# ---- the cluster in the accounting database (sacctmgr finds slurmdbd through slurm.conf) ----
# Registered before slurmctld starts, so its first jobs are recorded; this also creates the `root`
# account and root's association, the account jobs get when they name none.
for _ in $(seq 300); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.1; done
sacctmgr -n show cluster >/dev/null 2>&1 || die "slurmdbd did not come up" "$D/slurmdbd.log"
sacctmgr -n -P show cluster format=cluster | grep -qx cairn \
  || sacctmgr -i add cluster cairn >/dev/null

# ---- daemons (both fork into the background by themselves) ----
alive "$D/slurmctld.pid" || slurmctld -i          # -i: a corrupt state file is no reason to fail
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.1; done
scontrol ping 2>/dev/null | grep -q UP || die "slurmctld did not come up" "$D/slurmctld.log"
alive "$D/slurmd.pid" || slurmd -N localhost

# ---- wait until the node takes jobs ----
for _ in $(seq 100); do
  case "$(sinfo -h -n localhost -o %T 2>/dev/null || true)" in
    idle*|mixed*|allocated*) break ;;
    down*|drain*) scontrol update nodename=localhost state=resume 2>/dev/null || true ;;
  esac
  sleep 0.2
done
sinfo -h -n localhost -o %T | grep -qE '^(idle|mixed|allocated)' || die "node not usable" "$D/slurmd.log"
sinfo
