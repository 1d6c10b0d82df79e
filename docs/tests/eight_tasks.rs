//! The table at the top of `embedding.md` is true: each task's blocks
//! (tagged `# // pool` and `# // rayon`, a hidden line) have the visible
//! line counts the table quotes, the pool's total stays within 1.25x of
//! rayon's, and the pool's code holds no `unsafe`, atomic, `Mutex` or
//! `Cell`.

const EMBEDDING: &str = include_str!("../embedding.md");

/// One task: its number, and the visible lines of its pool and rayon
/// blocks.
#[derive(Debug, Default)]
struct Task {
    pool: Vec<String>,
    rayon: Vec<String>,
}

/// The tasks under "## Eight everyday tasks", in order.
fn tasks() -> Vec<Task> {
    let section = EMBEDDING
        .split("## Eight everyday tasks")
        .nth(1)
        .expect("embedding.md has the eight tasks")
        .split("\n## ")
        .next()
        .unwrap();
    let mut tasks: Vec<Task> = Vec::new();
    let mut block: Option<Vec<&str>> = None;
    for line in section.lines() {
        if line.starts_with("### ") {
            tasks.push(Task::default());
        } else if line.starts_with("```rust") {
            block = Some(Vec::new());
        } else if line == "```" {
            let lines = block.take().expect("a closing fence closes a block");
            let visible: Vec<String> = lines
                .iter()
                .filter(|l| !l.trim().is_empty() && !is_hidden(l))
                .map(|l| l.to_string())
                .collect();
            let task = tasks.last_mut().expect("blocks sit under a task heading");
            match lines.first().map(|l| l.trim()) {
                Some("# // pool") => task.pool = visible,
                Some("# // rayon") => task.rayon = visible,
                _ => {} // an untagged block: an aside, not counted
            }
        } else if let Some(lines) = block.as_mut() {
            lines.push(line);
        }
    }
    tasks
}

fn is_hidden(line: &str) -> bool {
    let line = line.trim_start();
    line == "#" || line.starts_with("# ")
}

/// The table's rows: (pool, rayon) per task, then the total.
fn table() -> Vec<(usize, usize)> {
    EMBEDDING
        .lines()
        .skip_while(|l| !l.starts_with("| task | pool | rayon |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[2].parse().unwrap(), cells[3].parse().unwrap())
        })
        .collect()
}

#[test]
fn every_task_has_a_pool_block_and_a_rayon_block() {
    let tasks = tasks();
    assert_eq!(tasks.len(), 8, "{tasks:#?}");
    for (i, task) in tasks.iter().enumerate() {
        assert!(
            !task.pool.is_empty() && !task.rayon.is_empty(),
            "task {}: {task:#?}",
            i + 1
        );
    }
}

#[test]
fn the_table_quotes_the_line_counts_of_the_blocks() {
    let tasks = tasks();
    let table = table();
    assert_eq!(table.len(), tasks.len() + 1, "eight rows and a total");
    for (i, (task, &(pool, rayon))) in tasks.iter().zip(&table).enumerate() {
        assert_eq!(
            (task.pool.len(), task.rayon.len()),
            (pool, rayon),
            "task {}: the blocks have {} and {} lines",
            i + 1,
            task.pool.len(),
            task.rayon.len()
        );
    }
    let total = |f: fn(&Task) -> usize| tasks.iter().map(f).sum::<usize>();
    let (pool, rayon) = (total(|t| t.pool.len()), total(|t| t.rayon.len()));
    assert_eq!(table.last(), Some(&(pool, rayon)), "the total row");
}

#[test]
fn the_pool_takes_at_most_a_quarter_more_lines_than_rayon() {
    let tasks = tasks();
    let pool: usize = tasks.iter().map(|t| t.pool.len()).sum();
    let rayon: usize = tasks.iter().map(|t| t.rayon.len()).sum();
    assert!(
        4 * pool <= 5 * rayon,
        "{pool} lines against rayon's {rayon}"
    );
}

#[test]
fn the_pools_code_has_no_unsafe_atomics_or_locks() {
    for (i, task) in tasks().iter().enumerate() {
        for line in &task.pool {
            for word in ["unsafe", "Atomic", "Mutex", "Cell", "RwLock"] {
                assert!(!line.contains(word), "task {}: `{line}` uses {word}", i + 1);
            }
        }
    }
}
