//! The kernel's CPU list format: `0-3,8,10-11\n`.

use crate::error::TopoError;

/// Parses a kernel CPU list (`0-3,8,10-11`, possibly empty, with
/// surrounding whitespace) into sorted, deduplicated CPU ids. Malformed
/// input is an error quoting it: never a silent partial list.
///
/// ```
/// assert_eq!(pool_topo::parse_cpu_list("0-3,8,10-11\n").unwrap(), vec![0, 1, 2, 3, 8, 10, 11]);
/// assert_eq!(pool_topo::parse_cpu_list("  \n").unwrap(), Vec::<usize>::new());
/// assert!(pool_topo::parse_cpu_list("0-x").is_err());
/// ```
pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, TopoError> {
    /// A cap on one range, so garbage like `0-4000000000` cannot allocate
    /// gigabytes; Linux's NR_CPUS maximum is 8192.
    const MAX_CPU_ID: usize = 1 << 16;
    let trimmed = text.trim();
    let mut cpus = Vec::new();
    if trimmed.is_empty() {
        return Ok(cpus);
    }
    for item in trimmed.split(',') {
        let item = item.trim();
        let parse = |number: &str| {
            number
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&cpu| cpu <= MAX_CPU_ID)
                .ok_or_else(|| TopoError::parse(text, format!("bad CPU id {number:?}")))
        };
        match item.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (parse(first)?, parse(last)?);
                if first > last {
                    return Err(TopoError::parse(
                        text,
                        format!("descending CPU range {item:?}"),
                    ));
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(parse(item)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Formats CPU ids back into the kernel's compact list format.
///
/// ```
/// assert_eq!(pool_topo::format_cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
/// ```
pub fn format_cpu_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut index = 0;
    while index < sorted.len() {
        let start = sorted[index];
        let mut end = start;
        while index + 1 < sorted.len() && sorted[index + 1] == end + 1 {
            index += 1;
            end = sorted[index];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        index += 1;
    }
    parts.join(",")
}
